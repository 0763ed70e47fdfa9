package cause

import "time"

// The start hold: on a run's first attempt, a failure at start (an exit
// status of 1-127 soon after the processes started: a misspelled script,
// a missing module, a KeyError on a config key) waits up to a short
// settle time before it stops the group, so that the other processes get
// to fail on their own rather than be stopped by drover a moment before
// they would have. Whether every rank failed the same way is what the
// restart policy then judges (restart.SameStartFailure): a start-up error
// that no restart fixes stops the run after one attempt. The hold costs a
// failure at start this long once per run, and nothing after the window:
// failures in training stop the group at once, as before.

// StartSettle is how long a failure at start waits for the others' ends,
// and StartWindow how long after the processes started a failure counts
// as one at start (python's start-up, torch's import, the config's
// parse).
const (
	StartSettle = 3 * time.Second
	StartWindow = 60 * time.Second
)

// HoldStartFailures turns the start hold on (see StartSettle) for
// failures drover sees before until, each waiting up to settle.
func (t *Tracker) HoldStartFailures(until time.Time, settle time.Duration) {
	t.startUntil, t.startSettle = until, settle
}

// atStart reports whether f, seen at now, is a failure at start to hold.
func (t *Tracker) atStart(f heldFailure, now time.Time) bool {
	return t.startSettle > 0 && now.Before(t.startUntil) && f.stop == Failed && f.code >= 1 && f.code <= 127
}

// holdAtStart holds f, a failure at start: the group stops when every
// process has ended, or at the settle time, for f (see fail).
func (t *Tracker) holdAtStart(a *Answer, f heldFailure, now time.Time) {
	f.start = true
	t.held = &f
	t.heldDue = now.Add(t.startSettle)
	a.Events = append(a.Events, f.reason+"; a failure at start: the others get "+t.startSettle.String()+" to end on their own before the group stops")
}
