package testenv

import (
	"testing"
	"time"
)

// Poll backoff of Wait: the first check again after firstPoll, each later
// wait twice the one before up to maxPoll. A condition that holds soon is
// seen soon; one that takes seconds (a fleet host's process, a remote
// command) is checked four times a second, not in a busy loop.
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 250 * time.Millisecond
)

// Wait is the one way a test waits for something: it checks cond until
// cond reports ok, at most for timeout, and otherwise fails t with
// t.Fatalf naming what it waited for, how long, and the status cond gave
// on its last check (what was seen instead: an output, an error, a count),
// so that a timeout says where things stood rather than only that time ran
// out. cond is checked once more at the deadline, so a bound is never
// shorter than it reads. Under testing/synctest the poll sleeps advance the
// bubble's fake clock like any other sleep.
func Wait(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, status string)) {
	t.Helper()
	poll(t, timeout, what, cond, firstPoll, maxPoll)
}

// WaitFor is Wait for a condition with nothing to say while it does not
// hold.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Wait(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// WaitEvery is WaitFor checking every interval, with no backoff: for a
// condition that holds only for a moment (a run still in its setup), which
// a poll backed off to maxPoll could miss.
func WaitEvery(t testing.TB, every, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll(t, timeout, what, func() (bool, string) { return cond(), "" }, every, every)
}

// poll is Wait with its backoff from first up to most.
func poll(t testing.TB, timeout time.Duration, what string, cond func() (bool, string), first, most time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	pause := first
	for {
		ok, status := cond()
		if ok {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			if status == "" {
				t.Fatalf("waited %s for %s", time.Since(start).Round(time.Millisecond), what)
				return
			}
			t.Fatalf("waited %s for %s; last seen: %s", time.Since(start).Round(time.Millisecond), what, status)
			return
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, most)
	}
}
