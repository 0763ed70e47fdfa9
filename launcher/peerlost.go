package launcher

import (
	"errors"
	"strings"
	"time"
)

// peerLostSettle is how long a failure that reads as a lost peer (its
// connection to another rank closed) waits, before it stops the group, for
// the exit that explains it. In a DDP desync the rank that finished early
// closes its sockets as it tears down, and its peers fail on them at once;
// when the teardown is slow (CUDA, atexit hooks, a loaded host), their
// failures reach drover before its exit 0 does, and judged by arrival the
// victim would be named the root cause. A rank killed by the OOM killer,
// or a host lost, explain such failures the same way. The hold costs a
// restart at most this long, and nothing when nothing explains the
// failure: the victim is then the root cause as before.
const peerLostSettle = 5 * time.Second

// peerLostSigns are what a rank prints when a peer it talks to went away
// (lower case): gloo's pair.cc, NCCL's remote error, the c10d store, gRPC
// (JAX). Matched against the failure's cause (its error file or stderr
// tail).
var peerLostSigns = []string{
	"connection closed by peer",
	"connection reset by peer",
	"broken pipe",
	"remote process exited or there was a network error",
	"ncclremoteerror",
	"failed to recv, got 0 bytes",
	"socket closed",
}

// peerLost reports whether cause says that a peer went away.
func peerLost(cause string) bool {
	c := strings.ToLower(cause)
	for _, sign := range peerLostSigns {
		if strings.Contains(c, sign) {
			return true
		}
	}
	return false
}

// heldFailure is a failure that reads as a lost peer, waiting for the
// exit that explains it (see fail).
type heldFailure struct {
	rp     *running
	out    attemptOutcome
	reason string
}

// fail ends the attempt with rp's failure (out, reason), unless the
// failure reads as a lost peer and nothing explains it yet: it is then
// held for up to peerLostSettle. While one is held, a failure that does
// not read as a lost peer (an exception, a signal, a lost host) is the
// root cause and stops the group at once, the held one listed after it; an
// exit 0 is an early finish, named first (see onExit); another lost peer
// is one more victim.
func (s *supervisor) fail(rp *running, out attemptOutcome, reason string) {
	if h := s.held; h != nil {
		if rp == h.rp || peerLost(rp.cause) {
			if s.remaining == 0 { // the last of the group: no one left to hear from
				s.releaseHeld()
			}
			return
		}
		s.held, s.heldAt = nil, nil
		rp.setCause(reason, s.a.r.now()) // a signal or exit status says nothing more
		h.rp.causeAfter(rp.causeAt, s.a.r)
		s.stop(out, reason)
		return
	}
	settle := s.a.r.opts.peerLostSettle
	if settle == 0 {
		settle = peerLostSettle
	}
	if s.stopping || s.firstEvent != "" || out.kind != outcomeFailed || s.remaining == 0 || !peerLost(rp.cause) {
		s.stop(out, reason)
		return
	}
	s.held = &heldFailure{rp: rp, out: out, reason: reason}
	s.heldAt = time.After(settle)
	s.a.r.events.printf("%s: %s; a peer went away first: waiting up to %s to hear which", s.a.prefix(), reason, settle)
}

// releaseHeld stops the group for the held failure: nothing explained it
// in time, or an early finish did (named already, as the attempt's first
// event).
func (s *supervisor) releaseHeld() {
	h := s.held
	s.held, s.heldAt = nil, nil
	if h == nil || s.stopping {
		return
	}
	reason := s.withFirstEvent(h.reason)
	if s.firstEvent != "" {
		h.rp.causeAfter(s.firstEventAt, s.a.r)
	}
	h.out.err = errors.New(reason)
	s.stop(h.out, reason)
}

// earlyExplainsHeld releases a held failure once an exit 0 came while it
// waited: that process, the peer that went away most likely, is named
// first, as the attempt's first event.
func (s *supervisor) earlyExplainsHeld() {
	if s.held != nil {
		s.flushEarly()
		s.releaseHeld()
	}
}

// causeAfter moves rp's cause after t on drover's clock, so that the
// summary lists it after the cause that explains it, and records it anew
// (its exit recorded it already).
func (rp *running) causeAfter(t time.Time, r *runner) {
	if rp.cause == "" || rp.causeAt.After(t) {
		return
	}
	rp.causeAt = t.Add(time.Millisecond)
	r.recordCause(rp.p, rp.cause, rp.causeAt)
}
