package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/cause"
	"github.com/droverhq/drover/launcher/notify"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/straggler"
)

// running is one started process of the attempt.
type running struct {
	p       plan.Process
	ctl     *control
	started time.Time
	outs    []io.Closer
	logFile io.WriteCloser
	// stderrTail is the end of its stderr, for a root cause when it
	// fails without an error file.
	stderrTail *cluster.TailBuffer
	done       bool
	// letGo: the supervisor detached from it while it runs on (its log
	// keeps no partial last line: the next attach sends it again).
	letGo bool
	// progress is when it last showed progress (runner.mono, plus one;
	// 0 until it first does); see supervisor_watch.go.
	progress atomic.Int64
	// reported: its progress file changed (a progress report, not
	// output), for the start-up failure rule.
	reported atomic.Bool
	// i is its number in supervisor.procs and in supervisor.causes.
	i int
}

type exitMsg struct {
	i   int
	err error
	at  time.Time
}

// supervisor starts the processes of one attempt and watches them until
// the group has stopped: start, then wait; the first event that ends the
// attempt (a failure, success, an interrupt) calls stop with its reason,
// and onExit accounts for each process as it goes.
type supervisor struct {
	a      *attempt
	pl     *plan.Plan
	byHost map[string]*attemptHost
	// sessions is the context of every process's session; cancelling it
	// closes the channels, which the agents take as "drover is gone".
	sessions context.Context
	cancel   context.CancelFunc
	// ctx is the attempt's: it ends when the run is interrupted.
	ctx context.Context

	procs     []*running // the started ones, in plan order
	exits     chan exitMsg
	remaining int

	// out is the outcome once decided (nil while the group runs).
	out      *attemptOutcome
	stopping bool
	// killAt ends the grace period; abandonAt gives up on processes that
	// never report their exit (their host is gone).
	killAt, abandonAt <-chan time.Time
	// stacksDone ends the wait for a hung group's stacks (see checkHang).
	stacksDone <-chan time.Time
	// verdict brings the hang verdict (see checkHang), hangReason what
	// the hang's event says before it.
	verdict    <-chan string
	hangReason string
	// lastPing is when the heartbeat last went out (see checkPaused), on
	// runner.mono's clock.
	lastPing time.Duration
	// health receives the GPU health reads while the group runs, and
	// warned holds the warnings already printed (see onHealth).
	health chan healthRead
	warned map[string]bool
	// watchers are the processes whose agents watch GPU health, by host.
	watchers map[string]string
	// replace receives the straggler to replace now (on_straggler =
	// "replace": replaceStraggler).
	replace chan straggler.Finding

	// workers are torchrun workers' ends as their agents report them.
	workers chan workerMsg
	// causes names the attempt's root cause from the processes' and
	// workers' ends (package cause); causeAt fires at causeDue, the next
	// time it asked to be told of (see act).
	causes   *cause.Tracker
	causeAt  <-chan time.Time
	causeDue time.Time
	// stopWaits are the stops, through their hosts, of what dead agents
	// left (stopLeftBy); the attempt ends after them.
	stopWaits sync.WaitGroup
}

func (rp *running) closeLogs() {
	if !rp.letGo {
		for _, w := range rp.outs {
			w.Close()
		}
	}
	rp.logFile.Close()
}

// send writes a control line to every process still running.
func (s *supervisor) send(line string) {
	for _, rp := range s.procs {
		if !rp.done {
			rp.ctl.Send(line)
		}
	}
}

// ping sends the heartbeat to every process still running.
func (s *supervisor) ping() {
	for _, rp := range s.procs {
		if !rp.done {
			rp.ctl.Ping()
		}
	}
	s.lastPing = s.a.r.mono()
}

// stop ends the attempt with out (unless an outcome was decided already)
// and asks every process still running to stop gracefully; why, when
// set, is said in the event.
func (s *supervisor) stop(out attemptOutcome, why string) {
	if s.out == nil {
		s.out = &out
	}
	if s.stopping {
		return
	}
	s.stopping = true
	s.causes.Stopping(s.out.kind == outcomeInterrupted)
	if out.kind != outcomeSucceeded && out.kind != outcomeInterrupted && s.a.leaseCheck == nil {
		// The check a restart needs runs while the group stops, not
		// after it: one round trip less for every restart.
		s.a.leaseCheck = s.a.r.checkLeasesSoon(s.ctx)
	}
	s.requestStop(why)
}

// requestStop asks every process still running to stop gracefully, and
// starts the grace period.
func (s *supervisor) requestStop(why string) {
	if why != "" {
		s.a.r.events.printf("%s: %s; stopping %d process(es)", s.a.prefix(), why, s.remaining)
	}
	s.send("stop")
	wait := s.a.cfg.Job.StopGrace + 2*time.Second
	if s.a.cfg.Job.Container.Set() {
		// The runtime stops a container by name, and kills in it at
		// the grace itself.
		wait += agent.ContainerStopSlack
	}
	s.killAt = time.After(wait)
}

// kill sends SIGKILL to what is left, and gives the processes a few
// seconds to report before their connections are closed.
func (s *supervisor) kill(why string) {
	s.a.r.events.printf("%s: %s", s.a.prefix(), why)
	s.send("kill")
	s.abandonAt = time.After(5 * time.Second)
}

// act carries out the causes' answer: it prints their events, records
// the causes for the summary, stops the group when told to, and arms the
// one timer for the next time they want to be told of.
func (s *supervisor) act(a cause.Answer) {
	for _, e := range a.Events {
		s.a.r.events.printf("%s: %s", s.a.prefix(), e)
	}
	for _, c := range a.Causes {
		s.a.r.recordCause(s.procs[c.Proc].p, c.Text, c.At)
	}
	switch a.Stop {
	case cause.Failed:
		s.stop(attemptOutcome{kind: outcomeFailed, err: errors.New(a.Reason), exitCode: a.Code}, a.Reason)
	case cause.HostLost:
		notifyLost(s.a, a.Reason, a.Causes, s.procs)
		s.stop(attemptOutcome{kind: outcomeHostLost, err: errors.New(a.Reason), exitCode: a.Code}, a.Reason)
	case cause.Succeeded:
		s.stop(succeeded(), s.successNote(s.procs))
	}
	switch due, ok := s.causes.Next(); {
	case !ok:
		s.causeAt, s.causeDue = nil, time.Time{}
	case !due.Equal(s.causeDue):
		s.causeAt, s.causeDue = time.After(due.Sub(s.a.r.now())), due
	}
}

// notifyLost tells that attempt a's group lost a host: the host of the
// earliest of causes (those of the answer that stopped the group; the
// summary's table may still hold an earlier attempt's).
func notifyLost(a *attempt, reason string, causes []cause.Cause, procs []*running) {
	ev := notify.Event{Kind: notify.HostLost, Attempt: a.n, Message: reason}
	var at time.Time
	for _, c := range causes {
		if c.Proc >= 0 && c.Proc < len(procs) && (ev.Host == "" || c.At.Before(at)) {
			ev.Host, at = procs[c.Proc].p.Host.Name, c.At
		}
	}
	a.r.events.notify(ev)
}

// describeExit renders a process's end for events and the summary.
func describeExit(err error) (text string, code int, lost bool) {
	if err == nil {
		return "0", 0, false
	}
	var ee *cluster.ExitError
	if errors.As(err, &ee) {
		sig := ee.Signal
		if sig == "" && ee.Code > 128 && ee.Code < 128+65 {
			// The agent reports a signal death as 128+n, as a shell does.
			sig = strings.TrimPrefix(unix.SignalName(syscall.Signal(ee.Code-128)), "SIG")
		}
		if sig != "" {
			return fmt.Sprintf("%d (SIG%s)", ee.Code, sig), ee.Code, false
		}
		return fmt.Sprint(ee.Code), ee.Code, false
	}
	if errors.Is(err, cluster.ErrConnectionLost) {
		return "host lost", -1, true
	}
	return "error: " + err.Error(), -1, true
}

// control is the stdin of one remote agent: drover writes "stop" or "kill"
// lines to it, and closing it (EOF) tells the agent that drover is gone.
// Sends never block, so a dead connection cannot wedge the supervisor.
type control struct {
	ch     chan []byte
	once   sync.Once
	closed chan struct{}
	buf    []byte
}

func newControl() *control {
	return &control{ch: make(chan []byte, 16), closed: make(chan struct{})}
}

// Send queues one control line; it is dropped if the queue is full (the
// agent already has a stop request pending) or the control is closed.
func (c *control) Send(line string) {
	select {
	case <-c.closed:
		return
	default:
	}
	select {
	case c.ch <- []byte(line + "\n"):
	default:
	}
}

// Ping queues a heartbeat unless lines are already waiting (they count as
// a heartbeat too), so pings never crowd out a stop or kill request.
func (c *control) Ping() {
	if len(c.ch) == 0 {
		c.Send("ping")
	}
}

// Close makes the agent's stdin reach EOF.
func (c *control) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// Read implements io.Reader for the transport's stdin copier.
func (c *control) Read(p []byte) (int, error) {
	if len(c.buf) == 0 {
		select {
		case b := <-c.ch:
			c.buf = b
		case <-c.closed:
			// Deliver what was queued before the close, then EOF.
			select {
			case b := <-c.ch:
				c.buf = b
			default:
				return 0, io.EOF
			}
		}
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// healthEvery is how often a running attempt's hosts are read (by the
// agent) and their reports looked at (by drover): an Xid 79 stops the
// group within about two of these and a stop.
const healthEvery = 2 * time.Second

// healthRead is one read of a running attempt's host.
type healthRead struct {
	host string
	rep  gpu.HostReport
}

// workerMsg is a torchrun worker's end, reported by its host's agent
// (agent.WorkerExit) and timed by drover's clock when its line arrived.
type workerMsg struct {
	rp *running
	w  agent.WorkerExit
	at time.Time
}

// processCause finds why rp, a failed process on c, failed (see
// rootCause).
func processCause(c *attemptHost, rp *running) string {
	var fsys cluster.FS
	if c != nil {
		fsys = c.fs
	}
	return rootCause(fsys, rp.p.Env["TORCHELASTIC_ERROR_FILE"], rp.stderrTail.String())
}

// succeeded applies the success policy to the processes that have exited
// (all with status 0, since any failure stops the group first).
func (s *supervisor) succeeded(procs []*running) bool {
	if s.a.cfg.Job.Framework != config.TensorFlow {
		for _, rp := range procs {
			if !rp.done {
				return false
			}
		}
		return true
	}
	hasChief := false
	for _, rp := range procs {
		if rp.p.Role == plan.RoleChief {
			hasChief = true
		}
	}
	for _, rp := range procs {
		switch rp.p.Role {
		case plan.RoleChief:
			if !rp.done {
				return false
			}
		case plan.RoleWorker:
			mustFinish := s.a.cfg.Job.SuccessPolicy != config.SuccessChief || (!hasChief && rp.p.Index == 0)
			if mustFinish && !rp.done {
				return false
			}
		}
	}
	return true
}

// successNote says why the group counts as succeeded.
func (s *supervisor) successNote(procs []*running) string {
	for _, rp := range procs {
		if !rp.done {
			return "success policy met (" + string(s.a.cfg.Job.SuccessPolicy) + ")"
		}
	}
	return ""
}
