// Package hostio is drover's I/O with the hosts of a job as both `drover
// run` (package launcher) and the inspection verbs (runview, netcheck,
// top, fanout) do it: a connection to one host (Conn: its transport,
// file access, home and agent), the hosts' views of a workdir's runs
// (ReadViews, through `drover agent runs`, each host within a deadline)
// and the run they agree on (Agree), the run record written to them
// (WriteRecord) and `drover stop`'s request (WriteStopRequest,
// ReadStopRequest), this machine's list of the runs it supervised and how
// long `drover ps` keeps them (NoteLocally, LocalRuns, SelectRuns), and
// what both read of a host's network and GPUs (DiscoverIfaces,
// GPUPolicy), and a host's GPU lease session (HoldGPUs, package gpulease;
// LeaseCandidates names the GPUs as both the run and probe key their
// leases).
//
// It sits below the run and the verbs so that neither imports the other:
// what both need lives here, once, and data flows one way, from cmd/drover
// through the run or a verb to this package and on to cluster and the
// agent's client (agent/remote).
package hostio
