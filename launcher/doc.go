// Package launcher runs a plan on the fleet and keeps it running.
//
// Run is the supervisor of `drover run`: each attempt (type attempt in
// attempt.go, which names its phases in order and the attempt_*.go file
// of each) connects to the hosts (keeping the previous attempt's
// connections that still answer, conns.go), holds their workdirs for this run (package lease: a live run
// of the same workdir makes it refuse, a dead one's group is a leftover),
// probes their GPUs, builds the plan (package plan), pushes the code,
// runs the job's setup where it is due (package setup: the first attempt's
// hosts and a spare that joins), preflights every host (leftovers, interface, program, ports: one agent
// command each), starts every process under the on-host agent at once and
// watches the group; independent setup steps run side by side, since each
// waits on the network;
// when one process dies, it stops them all and starts the next attempt from
// the newest checkpoint, re-reading the inventory first. Checkpoints are
// package checkpoint's: before each attempt it stages the newest one onto
// every host, and while the attempt runs it copies new ones to other hosts
// (launcher/checkpoints.go is the whole seam). The verbs that look at
// or act on a run from outside it (status, stop, logs, ps: runview;
// check net: netcheck; top; exec and probe: fanout) are packages of
// their own, beside this one; what the run shares with them (a
// connection to a host, the hosts' views of a workdir's runs, the run
// record) is package hostio's, below both.
//
// Each attempt ends in exactly one outcome (succeeded, failed, setup
// failed, host lost, hung, interrupted; see outcomeKind). The supervisor
// of one attempt is a small type (supervisor: start, stop with a reason,
// onExit) that feeds every end to package cause, which names the root
// cause and says when the group must stop (a process whose channel
// closed without its exit status ends as its agent's record on the host
// says, when there is one: recordedExit); the run loop decides on the
// outcome (after a run's first attempt, also on whether every rank failed
// alike at start: restart.SameStartFailure), by package restart's policy,
// whether to restart, and
// charges the restart to max_restarts, or, for what is the fleet's
// fault rather than the job's (a lost host, a hang, a controller that
// stopped sending heartbeats), to max_host_failures (restart.Budget). Hang
// detection (supervisor_watch.go) watches output and DROVER_PROGRESS_FILE; a restart
// moves a rendezvous port still held, and waits for the job's GPUs to be
// released.
//
// What each process gets (host, ranks, environment, argv) is decided by
// package plan alone; launcher only carries it out.
//
// The package's files read one way, in floors: result.go (options,
// result, events) and runner.go (the run's state across attempts) at the
// bottom, the phases above them, attempt.go above the phases, the
// supervisor above the attempt, and run.go (Run, the run loop, an
// attempt's phases in order) on top; a file names only what files below
// it declare (see "Reading the package" in docs/architecture.md).
package launcher
