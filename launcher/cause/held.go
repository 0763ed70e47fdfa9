package cause

import "time"

// fail ends the attempt with process f.proc's failure, unless the failure
// reads as a lost peer and nothing explains it yet: it is then held for
// up to the settle time. While one is held, a failure that does not read
// as a lost peer (an exception, a signal, a lost host) is the root cause
// and stops the group at once, the held one listed after it; an exit 0 is
// an early finish, named first (see Finished); another lost peer is one
// more victim. A failure at start (HoldStartFailures) is held the same
// way, to hear the others fail on their own: another failure at start is
// waited through, any other end stops the group for the held one. now is
// when drover saw the failure.
func (t *Tracker) fail(a *Answer, f heldFailure, now time.Time) {
	p := &t.procs[f.proc]
	if h := t.held; h != nil {
		if f.proc == h.proc || PeerLost(p.cause) || (h.start && t.atStart(f, now)) {
			if t.remaining() == 0 { // the last of the group: no one left to hear from
				t.releaseHeld(a)
			}
			return
		}
		if h.start { // the failure at start came first: it stays the cause
			p.setCause(f.reason, now)
			t.releaseHeld(a)
			return
		}
		t.held, t.heldDue = nil, time.Time{}
		p.setCause(f.reason, now) // a signal or exit status says nothing more
		t.causeAfter(a, h.proc, p.causeAt)
		t.stop(a, f.stop, f.code, f.reason)
		return
	}
	if !t.stopping && t.firstEvent == "" && t.remaining() > 0 && t.atStart(f, now) && !PeerLost(p.cause) {
		t.holdAtStart(a, f, now)
		return
	}
	if t.stopping || t.firstEvent != "" || f.stop != Failed || t.remaining() == 0 || !PeerLost(p.cause) {
		t.stop(a, f.stop, f.code, f.reason)
		return
	}
	t.held = &f
	t.heldDue = now.Add(t.settle)
	a.Events = append(a.Events, f.reason+"; a peer went away first: waiting up to "+t.settle.String()+" to hear which")
}

// releaseHeld stops the group for the held failure: nothing explained it
// in time, or an early finish did (named already, as the attempt's first
// event).
func (t *Tracker) releaseHeld(a *Answer) {
	h := t.held
	t.held, t.heldDue = nil, time.Time{}
	if h == nil || t.stopping {
		return
	}
	reason := t.withFirstEvent(h.reason)
	if t.firstEvent != "" {
		t.causeAfter(a, h.proc, t.firstEventAt)
	}
	t.stop(a, h.stop, h.code, reason)
}

// earlyExplainsHeld releases a held failure once an exit 0 came while it
// waited: that process, the peer that went away most likely, is named
// first, as the attempt's first event. A failure at start is no lost
// peer: it waits on, until the last process ended.
func (t *Tracker) earlyExplainsHeld(a *Answer) {
	if h := t.held; h != nil && h.start {
		// An exit 0 explains no failure at start: the hold goes on
		// while others run.
		if t.remaining() == 0 {
			t.releaseHeld(a)
		}
		return
	}
	if t.held != nil {
		t.flushEarly(a)
		t.releaseHeld(a)
	}
}

// causeAfter moves process i's cause after at on drover's clock, so that
// the summary lists it after the cause that explains it, and records it
// anew (its exit recorded it already).
func (t *Tracker) causeAfter(a *Answer, i int, at time.Time) {
	p := &t.procs[i]
	if p.cause == "" || p.causeAt.After(at) {
		return
	}
	p.causeAt = at.Add(time.Millisecond)
	a.Causes = append(a.Causes, Cause{Proc: i, Text: p.cause, At: p.causeAt})
}
