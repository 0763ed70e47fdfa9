// Package runview is how drover looks at and acts on a run, detached or
// foreground, from any machine with the job file and SSH access: `drover
// status`, `stop`, `logs` (and attach's streaming of them), `ps` (with
// --inventory, the hosts' GPU leases and queues too: HostGPULeases) and
// `stacks` (every live rank's Python stack, through `drover agent stacks`,
// judged by package stacktrace). It reads the hosts,
// never this machine's runs/ directory, through their agents (`drover
// agent runs`, `since`, `stop`) and file access, with the host I/O it
// shares with the run (package hostio); it never imports the run itself.
package runview
