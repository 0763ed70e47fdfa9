package sweep

import (
	"fmt"

	"github.com/droverhq/drover/cluster/config"
)

// Setback is why a trial's run gave its placement back without the
// trial itself failing.
type Setback int

const (
	// LeaseConflict: another run (another user's, or one started by
	// hand) leased a GPU the trial was placed on between the sweep's
	// look at the hosts and the trial's start. The trial waits and is
	// placed again; it spends nothing.
	LeaseConflict Setback = iota + 1
	// HostLost: the trial's host stopped answering (or never answered).
	// The host is out for the rest of the sweep, and the trial starts
	// again elsewhere while its max_host_failures lasts.
	HostLost
)

func (s Setback) String() string {
	switch s {
	case LeaseConflict:
		return "GPUs leased by another run"
	case HostLost:
		return "host lost"
	}
	return fmt.Sprintf("setback %d", int(s))
}

// SetbackError is a trial's run that ended in a Setback: the runner
// finds it with errors.As in what RunTrial returned (cmd/drover makes it
// from the run's typed errors: gpulease.BusyError, a lost host).
type SetbackError struct {
	Setback Setback
	Host    string
	Err     error
	// Cause, when set, is what happened in the sweep's terms, said
	// instead of Err: a trial's run of a lost host ends with its own
	// verdict on restarts ("max_host_failures = 0", the trial's setting),
	// while the sweep moves the trial by the job's.
	Cause string
}

func (e *SetbackError) Error() string {
	if e.Cause != "" {
		return fmt.Sprintf("%s on %s: %s", e.Setback, e.Host, e.Cause)
	}
	return fmt.Sprintf("%s on %s: %v", e.Setback, e.Host, e.Err)
}

func (e *SetbackError) Unwrap() error { return e.Err }

// Policy is the part of the job's restart policy that moves a trial:
// restart_policy = "never" moves none, max_host_failures bounds the moves
// of one trial after lost hosts.
type Policy struct {
	Never           bool
	MaxHostFailures int
}

// PolicyOf reads the policy from the job.
func PolicyOf(job config.Job) Policy {
	return Policy{Never: job.RestartPolicy == config.RestartNever, MaxHostFailures: job.MaxHostFailures}
}

// Decision is what follows a setback.
type Decision struct {
	// Requeue puts the trial back at the head of the pending trials;
	// false fails it, for Why.
	Requeue bool
	// MarkOut gives up on the host for the rest of the sweep.
	MarkOut bool
	// Block keeps the placement's GPUs from the next trial until the
	// hosts' leases are read again.
	Block bool
	// Why says, in the sweep's terms, what follows: why the trial fails,
	// or, for a trial that moves, the moves it has left.
	Why string
}

// Requeue decides what follows setback s of a trial that had lost
// hosts before this one: a lease conflict always waits (as drover run
// --queue would), a lost host is left out and the trial moves while
// its lost hosts stay within max_host_failures.
func (p Policy) Requeue(s Setback, lostBefore int) Decision {
	switch s {
	case LeaseConflict:
		return Decision{Requeue: true, Block: true}
	case HostLost:
		d := Decision{MarkOut: true}
		switch {
		case p.Never:
			d.Why = `not moving the trial to another host: restart_policy = "never"`
		case lostBefore >= p.MaxHostFailures:
			d.Why = fmt.Sprintf("not moving the trial to another host: it lost %d (max_host_failures = %d)", lostBefore+1, p.MaxHostFailures)
		default:
			d.Requeue = true
			d.Why = fmt.Sprintf("the trial moves to another host (moves left after this one: %d of the job's max_host_failures = %d)",
				p.MaxHostFailures-lostBefore-1, p.MaxHostFailures)
		}
		return d
	}
	return Decision{Why: s.String()}
}
