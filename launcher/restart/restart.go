package restart

import (
	"fmt"
	"slices"
	"time"

	"github.com/droverhq/drover/cluster/config"
)

// Kind is how one attempt of the whole group ended. Exactly one applies;
// the run loop decides on it what happens next.
type Kind int

const (
	// Succeeded: the success policy was met.
	Succeeded Kind = iota
	// Failed: a process exited non-zero or was killed, or the group
	// ended without meeting the success policy.
	Failed
	// SetupFailed: the group could not be set up (connect, probe, plan,
	// push, preflight, start).
	SetupFailed
	// HostLost: a host stopped answering, before or after its processes
	// started.
	HostLost
	// Hung: no process showed progress for hang_timeout.
	Hung
	// Interrupted: the user stopped the run (ctx cancelled).
	Interrupted
	// Fenced: the health gate kept hosts out before anything started and
	// spares stand in for them: set the attempt up again.
	Fenced
	// Adoptable: a foreground run's first attempt found, before it pushed
	// or started anything, a detached group to adopt.
	Adoptable
	// Regrow: a host left out of a shrunk group answers again and a new
	// checkpoint is complete: the group was stopped to take the host back
	// (regrow = "checkpoint"). Not a failure: it costs no restart.
	Regrow
	// Replaced: a straggler's host was set aside at a new checkpoint and
	// a spare stands in for it (on_straggler = "replace"). Not a
	// failure either: it costs no restart.
	Replaced
)

// Planned says the attempt was ended by drover on purpose, after a new
// checkpoint, to restart the group on other hosts (Regrow, Replaced):
// not a failure, so no backoff and no restart spent.
func (k Kind) Planned() bool { return k == Regrow || k == Replaced }

func (k Kind) String() string {
	switch k {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case SetupFailed:
		return "setup failed"
	case HostLost:
		return "host lost"
	case Hung:
		return "hung"
	case Interrupted:
		return "interrupted"
	case Fenced:
		return "hosts kept out"
	case Adoptable:
		return "a group to adopt"
	case Regrow:
		return "regrown"
	case Replaced:
		return "straggler replaced"
	}
	return fmt.Sprintf("outcomeKind(%d)", int(k))
}

// Outcome is what the policy needs to know of how an attempt ended.
type Outcome struct {
	Kind Kind
	// Err says what went wrong.
	Err error
	// ExitCode is the first failing process's exit status; -1 when no
	// process failed by exiting.
	ExitCode int
	// Permanent marks a setup failure that another attempt cannot fix
	// (refused credentials, a host gone for good, workdirs another run
	// holds). A configuration error (config.IsConfigError) is one too.
	Permanent bool
}

// Retryable applies restart_policy and the exit-status lists to how
// attempt n ended. A setup failure is worth another attempt only on a
// restart (the first attempt fails fast, so that a typo does not cost
// minutes) and unless it is a configuration error or permanent.
func Retryable(job config.Job, out Outcome, n int) (bool, string) {
	exited := out.Kind == Failed && out.ExitCode > 0
	switch {
	case exited && slices.Contains(job.FatalExitCodes, out.ExitCode):
		return false, fmt.Sprintf("exit status %d is in fatal_exit_codes", out.ExitCode)
	case exited && slices.Contains(job.RetryExitCodes, out.ExitCode):
		return true, ""
	case job.RestartPolicy == config.RestartNever:
		return false, `restart_policy = "never"`
	case out.Kind == SetupFailed && (n == 1 || out.Permanent || config.IsConfigError(out.Err)):
		return false, "the group could not be set up"
	case job.RestartPolicy == config.RestartExitCode && exited && out.ExitCode <= 127:
		return false, fmt.Sprintf(`exit status %d is permanent under restart_policy = "exit-code" (1-127 permanent, 128-255 and lost hosts retried)`, out.ExitCode)
	}
	return true, ""
}

// Budget counts the restarts a run has used, by cause: lost hosts and
// hangs (the fleet's fault) count against max_host_failures, everything
// else against max_restarts, as JobSet's RestartJobSetAndIgnoreMaxRestarts
// does for node failures; a restart that takes a host back into a shrunk
// group (Regrow) or puts a spare in a straggler's place (Replaced)
// against nothing.
type Budget struct {
	Restarts, HostFailures, Regrows, Replaced int
}

// Used is every restart taken, whatever its cause.
func (b Budget) Used() int { return b.Restarts + b.HostFailures + b.Regrows + b.Replaced }

// Total is the number of attempts the run may take as things stand: each
// host failure, regrow and replacement adds one beyond max_restarts + 1.
func (b Budget) Total(job config.Job) int {
	return job.MaxRestarts + 1 + b.HostFailures + b.Regrows + b.Replaced
}

// Spend takes a restart for out, the end of attempt n (the run's n-th
// here), from the budget, or returns why the run ends here: the policy
// says not to restart, or the budget is spent.
func (b *Budget) Spend(job config.Job, out Outcome, n int) error {
	retry, why := Retryable(job, out, n)
	switch {
	case out.Kind == Regrow:
		b.Regrows++
	case out.Kind == Replaced:
		b.Replaced++
	case !retry:
		return &EndError{Outcome: out, Why: "not restarting: " + why}
	case out.Kind == HostLost || out.Kind == Hung:
		if b.HostFailures >= job.MaxHostFailures {
			return &EndError{Outcome: out, Why: fmt.Sprintf("no restarts left for lost hosts and hangs (max_host_failures = %d)", job.MaxHostFailures)}
		}
		b.HostFailures++
	default:
		if b.Restarts >= job.MaxRestarts {
			return &EndError{Outcome: out, Why: fmt.Sprintf("no restarts left (max_restarts = %d)", job.MaxRestarts)}
		}
		b.Restarts++
	}
	return nil
}

// EndError is why a run ends after an attempt: the attempt's outcome
// and why no restart follows. It wraps the outcome's error, so that a
// caller of the run (drover sweep, which moves a trial whose host was
// lost) can tell by errors.As how the last attempt ended.
type EndError struct {
	Outcome Outcome
	Why     string
}

func (e *EndError) Error() string { return fmt.Sprintf("%v; %s", e.Outcome.Err, e.Why) }

func (e *EndError) Unwrap() error { return e.Outcome.Err }

// Backoff is restart_backoff doubled per restart, capped at
// restart_backoff_max.
func Backoff(job config.Job, restarts int) time.Duration {
	d := job.RestartBackoff
	for i := 1; i < restarts && d < job.RestartBackoffMax; i++ {
		d *= 2
	}
	if job.RestartBackoffMax > 0 && d > job.RestartBackoffMax {
		d = job.RestartBackoffMax
	}
	return d
}

// Plan is what a planned restart (Kind.Planned) does, for the restarted
// notification to say: the straggler's host set aside and the spare in
// its place (Replaced), or the host taken back and the size of the group
// regrown (Regrow), and the checkpoint the group restarts from.
type Plan struct {
	// Host is the straggler's host (Replaced) or the host taken back
	// (Regrow); Spare the spare that stands in for it (Replaced).
	Host, Spare string
	// Hosts is how many hosts the regrown group has (Regrow).
	Hosts int
	// Checkpoint names the checkpoint the next attempt resumes from.
	Checkpoint string
	// Why is what made drover do it: the straggler's finding
	// (Replaced).
	Why string
}

// Restarted is the restarted notification's message and root cause for
// attempt n, which ended as kind (err: why), followed by attempt n+1
// after delay. A failure says so and gives err as the root cause; a
// planned restart says what drover did ("replaced straggler host h1 with
// spare h2 at checkpoint step-50") and, as its root cause, that it was
// planned and why: a replacement or a regrow is not a failure, and an
// alert rule on "failed" must not fire for it.
func Restarted(kind Kind, n int, delay time.Duration, p Plan, err error) (message, rootCause string) {
	next := fmt.Sprintf("attempt %d starts in %s", n+1, delay.Round(time.Millisecond))
	at := ""
	if p.Checkpoint != "" {
		at = " at checkpoint " + p.Checkpoint
	}
	why := ""
	if err != nil {
		why = err.Error()
	}
	switch {
	case kind == Replaced && p.Host != "":
		rootCause = `straggler replaced (on_straggler = "replace"), not a failure`
		if p.Why != "" {
			rootCause += ": " + p.Why
		}
		return fmt.Sprintf("replaced straggler host %s with spare %s%s; %s", p.Host, p.Spare, at, next), rootCause
	case kind == Regrow && p.Hosts > 0:
		return fmt.Sprintf("regrew to %d hosts%s, taking %s back; %s", p.Hosts, at, p.Host, next),
			fmt.Sprintf(`regrow (regrow = "checkpoint"), not a failure: %s answers again and a new checkpoint is complete`, p.Host)
	case kind.Planned():
		rootCause = "planned (" + kind.String() + "), not a failure"
		if why != "" {
			rootCause += ": " + why
		}
		return fmt.Sprintf("attempt %d ended to restart on other hosts (%s)%s; %s", n, kind, at, next), rootCause
	}
	return fmt.Sprintf("attempt %d failed; %s", n, next), why
}
