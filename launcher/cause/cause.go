package cause

import (
	"strings"
	"time"
)

// EarlyFinishWait is how long a process (or torchrun worker) that exited 0
// while others still run waits to be named in an event: at the end of a
// healthy run every rank exits 0 within moments of the others, which is
// no event; a rank that finished this long before the rest (a desync, a
// script that skipped its training loop) is one. A failure in the
// meantime names it at once, before the failure, as the attempt's first
// event.
const EarlyFinishWait = 5 * time.Second

// PeerLostSettle is how long a failure that reads as a lost peer (its
// connection to another rank closed) waits, before it stops the group, for
// the exit that explains it. In a DDP desync the rank that finished early
// closes its sockets as it tears down, and its peers fail on them at once;
// when the teardown is slow (CUDA, atexit hooks, a loaded host), their
// failures reach drover before its exit 0 does, and judged by arrival the
// victim would be named the root cause. A rank killed by the OOM killer,
// or a host lost, explain such failures the same way. The hold costs a
// restart at most this long, and nothing when nothing explains the
// failure: the victim is then the root cause as before.
const PeerLostSettle = 5 * time.Second

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

// PeerLost reports whether cause says that a peer went away.
func PeerLost(cause string) bool {
	c := strings.ToLower(cause)
	for _, sign := range peerLostSigns {
		if strings.Contains(c, sign) {
			return true
		}
	}
	return false
}

// TorchStopped reports a cause that says torch's elastic agent (torchrun)
// was signalled: drover's stop, not a failure of its own.
func TorchStopped(cause string) bool {
	return strings.Contains(cause, "SignalException: Process ")
}

// Stop is what an answer asks of the group.
type Stop int

const (
	// Continue: the group runs on.
	Continue Stop = iota
	// Failed: stop the group, the attempt failed (Answer.Reason, Code).
	Failed
	// HostLost: stop the group, a host was lost (Answer.Reason).
	HostLost
	// Succeeded: stop the group, the success policy is met.
	Succeeded
)

// Answer is what the Tracker decided on one event, for the supervisor to
// act on in this order: print Events, record Causes, then stop the group
// when Stop says so.
type Answer struct {
	// Events are drover's events to print, each after the attempt's
	// prefix ("attempt 1/3: ").
	Events []string
	// Causes are processes' causes to record for the summary, in order
	// (a later one of the same process replaces an earlier one).
	Causes []Cause
	// Stop says whether the group must stop now, and how it ended.
	Stop Stop
	// Reason is the failure's message: the event's reason and the
	// attempt's error, the root cause as drover prints it.
	Reason string
	// Code is the failing process's (or worker's) exit status; -1 when
	// none (a lost host).
	Code int
}

// Cause is why one process's attempt went wrong and when drover saw it:
// the summary orders causes by that time, the first is the root cause.
type Cause struct {
	Proc int
	Text string
	At   time.Time
}

// Exit is a process that exited non-zero or was killed.
type Exit struct {
	Proc int
	// At is when its end reached drover; Seen when drover had read its
	// cause (zero: At).
	At, Seen time.Time
	// Status is its end as the summary shows it ("1", "137 (SIGKILL)");
	// Code the exit status.
	Status string
	Code   int
	// Cause is what its error file or stderr says ("" for nothing, or
	// when NeedsCause said it was not wanted).
	Cause string
}

// Worker is a torchrun worker's end, reported by its host's agent.
type Worker struct {
	// Proc is the drover process (torchrun) the worker ran under.
	Proc int
	// At is when its report reached drover; Seen when drover had read
	// its cause (zero: At).
	At, Seen time.Time
	Rank     int
	// Failed: it did not exit 0; How says how it ended ("exited 1",
	// "killed by SIGKILL (137)"), Status its exit status, Signal the
	// signal that killed it ("TERM", "KILL"), if any.
	Failed bool
	How    string
	Status int
	Signal string
	// Running is how many other workers still run on its host.
	Running int
	// Cause is what its error file or stderr says.
	Cause string
}

// proc is one started process of the attempt as the Tracker knows it.
type proc struct {
	name, host string
	done       bool
	cause      string
	causeAt    time.Time
}

func (p *proc) who() string { return p.name + "@" + p.host }

// setCause records why p's attempt went wrong and when drover saw it;
// the first cause of a process counts.
func (p *proc) setCause(cause string, at time.Time) {
	if p.cause == "" {
		p.cause, p.causeAt = cause, at
	}
}

// earlyFinish is a process or worker that exited 0 while others still
// ran, not yet named in an event.
type earlyFinish struct {
	proc int
	what string // "worker-0@h1 finished while 4 others still run"
	at   time.Time
}

// heldFailure is a failure that reads as a lost peer, waiting for the
// exit that explains it (see fail).
type heldFailure struct {
	proc   int
	stop   Stop
	code   int
	reason string
	// start: held as a failure at start (see HoldStartFailures).
	start bool
}

// Tracker attributes one attempt's failure. It is fed every end of the
// attempt's processes and workers, in the order drover hears of them, and
// told when the group stops for a reason of its own (Stopping).
type Tracker struct {
	settle time.Duration
	procs  []proc
	// stopping: the group is being stopped; interrupted: by the user.
	stopping, interrupted bool
	// early are exits 0 while others still ran, not yet named; earlyDue
	// names them (EarlyFinishWait); earlySaid: the attempt's first event
	// was one.
	early        []earlyFinish
	earlyDue     time.Time
	earlySaid    bool
	firstEvent   string
	firstEventAt time.Time
	// held is a failure that reads as a lost peer, waiting until heldDue
	// for the exit that explains it (see fail).
	held    *heldFailure
	heldDue time.Time
	// startUntil and startSettle are the start hold (starthold.go).
	startUntil  time.Time
	startSettle time.Duration
}

// New returns a Tracker whose lost-peer hold lasts settle (0:
// PeerLostSettle).
func New(settle time.Duration) *Tracker {
	if settle == 0 {
		settle = PeerLostSettle
	}
	return &Tracker{settle: settle}
}

// Add adds a started process, name on host; its number (0, 1, ...) names
// it in events.
func (t *Tracker) Add(name, host string) int {
	t.procs = append(t.procs, proc{name: name, host: host})
	return len(t.procs) - 1
}

// Stopping tells the Tracker that the group is stopping for a reason of
// its own (success, a setup failure, a hang, a lost controller); with
// interrupted, that the user stopped it, which explains every end after.
func (t *Tracker) Stopping(interrupted bool) {
	t.stopping, t.interrupted = true, interrupted
}

// Next is when the Tracker wants a Tick: an early finish to name, a held
// failure's end of wait. ok is false when it wants none.
func (t *Tracker) Next() (at time.Time, ok bool) {
	switch {
	case t.earlyDue.IsZero():
		return t.heldDue, !t.heldDue.IsZero()
	case t.heldDue.IsZero() || t.earlyDue.Before(t.heldDue):
		return t.earlyDue, true
	}
	return t.heldDue, true
}

// Tick acts on what is due at now: the early finishes not yet named are
// named, a held failure that nothing explained stops the group.
func (t *Tracker) Tick(now time.Time) Answer {
	var a Answer
	if !t.earlyDue.IsZero() && !now.Before(t.earlyDue) {
		t.flushEarly(&a)
	}
	if !t.heldDue.IsZero() && !now.Before(t.heldDue) {
		t.releaseHeld(&a)
	}
	return a
}

// remaining is how many started processes have not ended.
func (t *Tracker) remaining() int {
	n := 0
	for i := range t.procs {
		if !t.procs[i].done {
			n++
		}
	}
	return n
}

func colon(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}
