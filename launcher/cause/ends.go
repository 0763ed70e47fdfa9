package cause

import (
	"fmt"
	"time"
)

// NeedsCause reports whether process i's failed exit with status code
// needs its cause read (its error file or stderr, a request to its host):
// not when drover's own stop (SIGTERM, SIGKILL: 143, 137) or the user's
// interrupt explains it.
func (t *Tracker) NeedsCause(i, code int) bool {
	return !t.stopping || (code != 143 && code != 137 && !t.interrupted)
}

// NeedsWorkerCause reports whether w's cause is needed: only for a
// failure to name (one request to its host).
func (t *Tracker) NeedsWorkerCause(w Worker) bool {
	return w.Failed && !t.procs[w.Proc].done && (!t.stopping || !t.stoppedWorker(w))
}

// stoppedWorker reports a worker's end that drover's own stop explains:
// SIGTERM or SIGKILL, or any end once the run was interrupted.
func (t *Tracker) stoppedWorker(w Worker) bool {
	return w.Signal == "TERM" || w.Signal == "KILL" || t.interrupted
}

// Exited takes a process's failed exit: it fails the attempt, or, once
// the group is stopping, is a victim listed after the cause.
func (t *Tracker) Exited(e Exit) Answer {
	var a Answer
	p := &t.procs[e.Proc]
	p.done = true
	seen := e.Seen
	if seen.IsZero() {
		seen = e.At
	}
	switch {
	case t.stopping && t.NeedsCause(e.Proc, e.Code):
		// A victim, most likely (a peer's connection closed):
		// listed after the cause, not as it.
		if e.Cause == "" {
			p.setCause("exited "+e.Status, e.At)
		} else if !TorchStopped(e.Cause) {
			p.setCause(e.Cause, e.At)
		}
	case t.stopping:
	default:
		t.flushEarly(&a)
		reason := fmt.Sprintf("%s exited %s", p.who(), e.Status) + colon(e.Cause)
		p.setCause(e.Cause, seen)
		reason = t.withFirstEvent(reason)
		t.fail(&a, heldFailure{proc: e.Proc, stop: Failed, code: e.Code, reason: reason}, seen)
	}
	return t.recordEnd(a, e.Proc)
}

// HostLost takes process i's end because its host stopped answering
// (lost: "h2 (10.0.0.2) lost: connection lost"): the attempt's failure,
// nothing once the group is stopping.
func (t *Tracker) HostLost(i int, at time.Time, lost string) Answer {
	var a Answer
	t.procs[i].done = true
	if !t.stopping {
		t.flushEarly(&a)
		reason := fmt.Sprintf("%s: %s", t.procs[i].who(), lost)
		t.fail(&a, heldFailure{proc: i, stop: HostLost, code: -1, reason: reason}, at)
	}
	return t.recordEnd(a, i)
}

// Finished takes process i's exit 0 at at; successMet says that the
// success policy is met with it. While others still run it is an early
// finish, named after EarlyFinishWait or at the next failure; it explains
// a held failure at once.
func (t *Tracker) Finished(i int, at time.Time, successMet bool) Answer {
	var a Answer
	t.procs[i].done = true
	switch {
	case t.stopping:
	case t.held == nil && successMet:
		t.early, t.earlyDue = nil, time.Time{} // the end of a healthy run: no event
		t.stop(&a, Succeeded, -1, "")
	default:
		if t.remaining() > 0 || t.held != nil {
			t.noteEarly(i, at)
		}
		t.earlyExplainsHeld(&a)
	}
	return t.recordEnd(a, i)
}

// recordEnd adds process i's cause, if any, to an answer on its end: the
// summary row its exit rewrote gets it again.
func (t *Tracker) recordEnd(a Answer, i int) Answer {
	if p := &t.procs[i]; p.cause != "" {
		a.Causes = append(a.Causes, Cause{Proc: i, Text: p.cause, At: p.causeAt})
	}
	return a
}

// WorkerEnded acts on a torchrun worker's end the moment drover hears of
// it: the first abnormal one is the attempt's failure (its agent stops
// its host's group and exits with the worker's status, but the group
// need not wait for that, nor for torchrun's exit barrier); one that
// exited 0 while the group runs may be an early finish; one that fails
// once the group is stopping is a victim, listed after the cause.
func (t *Tracker) WorkerEnded(w Worker) Answer {
	var a Answer
	p := &t.procs[w.Proc]
	who := fmt.Sprintf("rank %d (%s)", w.Rank, p.who())
	seen := w.Seen
	if seen.IsZero() {
		seen = w.At
	}
	switch {
	case p.done:
	case t.stopping && w.Failed && !t.stoppedWorker(w):
		p.setCause(fmt.Sprintf("%s %s%s", who, w.How, colon(w.Cause)), w.At)
	case t.stopping:
	case !w.Failed:
		what := fmt.Sprintf("%s finished while %d other worker(s) on %s and %d other host(s) still run",
			who, w.Running, p.host, t.remaining()-1)
		t.early = append(t.early, earlyFinish{proc: w.Proc, what: what, at: w.At})
		t.armEarly(w.At)
		t.earlyExplainsHeld(&a)
	default:
		reason := fmt.Sprintf("%s %s", who, w.How) + colon(w.Cause)
		p.setCause(reason, w.At)
		t.flushEarly(&a)
		reason = t.withFirstEvent(reason)
		t.fail(&a, heldFailure{proc: w.Proc, stop: Failed, code: w.Status, reason: reason}, seen)
	}
	return a
}

// noteEarly records process i's exit 0 at at while others still run
// (pytorch and the other per-process frameworks).
func (t *Tracker) noteEarly(i int, at time.Time) {
	others := t.remaining()
	if t.held != nil {
		others++ // the held failure's process still ran when it finished
	}
	what := fmt.Sprintf("%s finished while %d other(s) still run", t.procs[i].who(), others)
	t.early = append(t.early, earlyFinish{proc: i, what: what, at: at})
	t.armEarly(at)
}

func (t *Tracker) armEarly(at time.Time) {
	if t.earlyDue.IsZero() {
		t.earlyDue = at.Add(EarlyFinishWait)
	}
}

// flushEarly names every early finish not yet named, in the order drover
// saw them, each as the event it is; the first of the attempt is its
// first event, which the summary gives as the root cause should the
// attempt fail.
func (t *Tracker) flushEarly(a *Answer) {
	t.earlyDue = time.Time{}
	for _, e := range t.early {
		a.Events = append(a.Events, fmt.Sprintf("%s (exit 0 at %s)", e.what, e.at.Format("15:04:05.000")))
		if !t.earlySaid {
			t.earlySaid, t.firstEvent, t.firstEventAt = true, e.what, e.at
			p := &t.procs[e.proc]
			p.setCause(e.what+": the attempt's first event", e.at)
			if p.done { // its exit is recorded already
				a.Causes = append(a.Causes, Cause{Proc: e.proc, Text: p.cause, At: p.causeAt})
			}
		}
	}
	t.early = t.early[:0]
}

// withFirstEvent adds the attempt's first event, when there was one, to a
// failure's reason: after an early finish (a desync) the failing rank is
// most likely a victim of it.
func (t *Tracker) withFirstEvent(reason string) string {
	if t.firstEvent == "" {
		return reason
	}
	return reason + "; the attempt's first event: " + t.firstEvent
}

// stop answers that the group must stop now.
func (t *Tracker) stop(a *Answer, s Stop, code int, reason string) {
	if !t.stopping {
		a.Stop, a.Code, a.Reason = s, code, reason
	}
	t.stopping = true
}
