package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/cause"
	"github.com/droverhq/drover/launcher/logstream"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/restart"
)

// outcomeKind is how one attempt of the whole group ended (package
// restart, whose policy decides on it): exactly one applies; the run loop
// (runner.run) decides on it what happens next.
type outcomeKind = restart.Kind

const (
	outcomeSucceeded   = restart.Succeeded
	outcomeFailed      = restart.Failed
	outcomeSetupFailed = restart.SetupFailed
	outcomeHostLost    = restart.HostLost
	outcomeHung        = restart.Hung
	outcomeInterrupted = restart.Interrupted
	outcomeFenced      = restart.Fenced
	outcomeAdoptable   = restart.Adoptable
)

// attemptOutcome is how one attempt ended and why.
type attemptOutcome struct {
	kind outcomeKind
	// err says what went wrong; nil when it succeeded or was interrupted.
	err error
	// exitCode is the first failing process's exit status; -1 when no
	// process failed by exiting (setup, lost host, hang).
	exitCode int
	// permanent marks a setup failure that another attempt cannot fix
	// (a configuration error, refused credentials, a host gone for good
	// after host_wait and the spares).
	permanent bool
	// reattach marks a detached run's attempt that ended because this
	// supervisor lost its processes' channels (a dead link, a machine
	// asleep), not because they ended: the run attaches again.
	reattach bool
}

// policy is what the restart policy needs of out: a setup failure is
// permanent also when the hosts' workdirs are held by another run.
func (out attemptOutcome) policy() restart.Outcome {
	return restart.Outcome{Kind: out.kind, Err: out.err, ExitCode: out.exitCode, Permanent: out.permanent || IsHeld(out.err)}
}

func succeeded() attemptOutcome   { return attemptOutcome{kind: outcomeSucceeded, exitCode: -1} }
func interrupted() attemptOutcome { return attemptOutcome{kind: outcomeInterrupted, exitCode: -1} }

// setupFailed is the outcome of an error before the group ran. A
// connection that died on the way is a lost host.
func setupFailed(err error) attemptOutcome {
	if cluster.IsConnectionLost(err) {
		return attemptOutcome{kind: outcomeHostLost, err: err, exitCode: -1}
	}
	return attemptOutcome{kind: outcomeSetupFailed, err: err, exitCode: -1}
}

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
	// 0 until it first does); see hang.go.
	progress atomic.Int64
	// i is its number in supervisor.procs and in supervisor.causes.
	i int
}

type exitMsg struct {
	i   int
	err error
	at  time.Time
}

const pidDir = ".drover/pids"

// Drover pings every agent this often; an agent that hears nothing for
// heartbeatTimeout stops its group (drover died or the link is down).
const (
	heartbeatEvery   = time.Second
	heartbeatTimeout = 6 * time.Second
)

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
	// lastPing is when the heartbeat last went out (see checkPaused), on
	// runner.mono's clock.
	lastPing time.Duration
	// health receives the GPU health reads while the group runs, and
	// warned holds the warnings already printed (see onHealth).
	health chan healthRead
	warned map[string]bool
	// watchers are the processes whose agents watch GPU health, by host.
	watchers map[string]string

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

func newSupervisor(a *attempt, conns []*attemptHost, pl *plan.Plan) *supervisor {
	s := &supervisor{a: a, pl: pl, byHost: map[string]*attemptHost{}, exits: make(chan exitMsg, len(pl.Processes)),
		workers: make(chan workerMsg, 64),
		health:  make(chan healthRead), warned: map[string]bool{},
		causes: cause.New(a.r.opts.peerLostSettle)}
	for _, c := range conns {
		s.byHost[c.host.Name] = c
	}
	s.watchers = s.healthWatchers()
	s.sessions, s.cancel = context.WithCancel(context.Background())
	return s
}

// start starts every process of the plan, all at once: each start waits
// for its host to open a session and run the agent (two round trips),
// and one after another they would cost two round trips per process. A
// process that cannot be started fails the attempt as a setup failure and
// stops the others.
func (s *supervisor) start() {
	for _, p := range s.pl.Processes {
		s.a.r.register(p)
	}
	term := logstream.NewSink(s.a.r.opts.Out)
	type started struct {
		rp   *running
		proc cluster.Process
		err  error
	}
	res := make([]started, len(s.pl.Processes))
	var wg sync.WaitGroup
	for i, p := range s.pl.Processes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i].rp, res[i].proc, res[i].err = s.startOne(p, term)
		}()
	}
	wg.Wait()
	var startErr error
	for _, r := range res {
		if r.err != nil {
			startErr = errors.Join(startErr, r.err)
			continue
		}
		i := s.causes.Add(r.rp.p.Name(), r.rp.p.Host.Name)
		r.rp.i = i
		s.procs = append(s.procs, r.rp)
		go func() {
			err := r.proc.Wait()
			s.exits <- exitMsg{i: i, err: err, at: s.a.r.now()}
		}()
	}
	s.remaining = len(s.procs)
	s.a.r.events.debugf("%s: setup: processes started", s.a.prefix())
	s.a.r.events.printf("%s: started %d process(es) on %d host(s)", s.a.prefix(), len(s.procs), len(s.byHost))
	if startErr != nil {
		s.a.r.events.printf("%s: %v", s.a.prefix(), startErr)
		s.stop(setupFailed(startErr), "")
	}
}

// startOne opens p's log and starts p under the agent on its host. It
// returns the running process only when p started.
func (s *supervisor) startOne(p plan.Process, term *logstream.Sink) (*running, cluster.Process, error) {
	a := s.a
	c := s.byHost[p.Host.Name]
	localLog := filepath.Join(a.logDir, p.Name()+".log")
	var f io.WriteCloser
	if a.adopt != nil {
		f = a.r.appendLog(localLog)
	} else {
		f = a.r.createLog(localLog)
	}
	rp := &running{p: p, ctl: newControl(), started: a.r.now(), logFile: f}
	fileSink := logstream.NewSink(f)
	mk := func() io.Writer {
		fw := logstream.NewPrefixWriter(fileSink, "")
		rp.outs = append(rp.outs, fw)
		if a.r.opts.Quiet {
			return io.MultiWriter(fw, progressWriter{rp, a.r.mono})
		}
		tw := logstream.NewPrefixWriter(term, fmt.Sprintf("[%s@%s] ", p.Name(), p.Host.Name))
		rp.outs = append(rp.outs, tw)
		return io.MultiWriter(fw, tw, progressWriter{rp, a.r.mono})
	}
	rp.stderrTail = cluster.NewTailBuffer(stderrTailBytes)
	stdout, stderr := mk(), io.MultiWriter(mk(), rp.stderrTail)
	torchrun := a.cfg.Job.Framework == config.Torchrun
	if a.r.detachedGroup {
		// An attach client sends stdout and stderr as one stream.
		stdout = io.MultiWriter(stdout, rp.stderrTail)
		if torchrun {
			stdout = io.MultiWriter(stdout, &workerLines{rp: rp, out: s.workers, now: a.r.now})
		}
	} else if torchrun {
		stderr = io.MultiWriter(stderr, &workerLines{rp: rp, out: s.workers, now: a.r.now})
	}
	envLine, err := agent.EnvLine(a.processEnv(p))
	if err != nil {
		rp.closeLogs()
		return nil, nil, fmt.Errorf("start %s on %s: %w", p.Name(), hostLabel(p.Host), err)
	}
	wd := remoteAbs(c.home, p.Workdir)
	var health string
	if s.watchers[p.Host.Name] == p.Name() {
		health = healthFile(remoteAbs(c.home, c.host.Workdir), a.n)
	}
	ro := agent.RunOptions{
		HealthFile: health, HealthEvery: healthEvery,
		Grace:   a.cfg.Job.StopGrace,
		PIDFile: path.Join(wd, pidDir, p.Name()+".pid"),
		LogFile: path.Join(wd, ".drover/logs", fmt.Sprintf("attempt-%d", a.n), p.Name()+".log"),
		Job:     a.cfg.Job.Name,
		Args:    p.Command,
		// The agent stops its group when drover falls silent: the
		// only way it learns of a controller behind a dead link.
		Heartbeat: heartbeatTimeout,
		// The rank's environment goes over the agent's stdin, set only
		// on the command's exec: not in the agent's environ, nor in
		// the login shell's command line.
		EnvFromStdin: true,
		// torchrun's workers are watched where they die, not where
		// torchrun (and its 300 s exit barrier) reports them.
		WatchWorkers: torchrun,
	}
	if a.r.detachedGroup {
		ro.State, ro.LogFile = a.processFiles(c, p.Name())
		ro.RunID, ro.Attempt, ro.Rank, ro.Name = a.r.runID, a.n, p.Rank, p.Name()
		ro.ControllerTimeout = a.r.controllerTimeout(a.cfg)
	}
	args := agent.Command(c.agent, ro)
	if a.adopt != nil {
		args = a.attachArgs(c, p, localLog)
	}
	stdin := io.MultiReader(bytes.NewReader(envLine), rp.ctl)
	proc, err := c.t.Start(s.sessions, cluster.Cmd{Args: args, Dir: p.Workdir, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if err != nil {
		rp.closeLogs()
		return nil, nil, fmt.Errorf("start %s on %s: %w", p.Name(), hostLabel(p.Host), err)
	}
	return rp, proc, nil
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
	s.killAt = time.After(s.a.cfg.Job.StopGrace + 2*time.Second)
}

// kill sends SIGKILL to what is left, and gives the processes a few
// seconds to report before their connections are closed.
func (s *supervisor) kill(why string) {
	s.a.r.events.printf("%s: %s", s.a.prefix(), why)
	s.send("kill")
	s.abandonAt = time.After(5 * time.Second)
}

// onExit accounts for one process's end and hands it to the causes,
// which decide what it means for the group (see act): a failure stops
// it, the last exit the success policy needs ends it.
func (s *supervisor) onExit(m exitMsg) {
	// A worker's report is written before its agent exits: act on it
	// first, whichever channel the select picked.
	s.drainWorkers()
	s.remaining--
	rp := s.procs[m.i]
	rp.done = true
	if s.a.r.detachedGroup && !s.stopping && cluster.IsConnectionLost(m.err) {
		s.letGo(fmt.Sprintf("lost the channel to %s@%s: %v", rp.p.Name(), rp.p.Host.Name, m.err))
	}
	rp.closeLogs()
	text, code, lost := describeExit(m.err)
	s.a.r.record(rp.p, text, m.at.Sub(rp.started))
	if how, died := agentDied(m.err); died {
		s.stopLeftBy(rp, how)
	}
	switch {
	case m.err == nil:
		s.act(s.causes.Finished(m.i, m.at, len(s.procs) == len(s.pl.Processes) && s.a.succeeded(s.procs)))
	case lost:
		if !s.stopping {
			s.a.r.noteLost(rp.p.Host.Name)
		}
		s.act(s.causes.HostLost(m.i, m.at, fmt.Sprintf("%s lost: %v", hostLabel(rp.p.Host), m.err)))
	default:
		e := cause.Exit{Proc: m.i, At: m.at, Status: text, Code: code}
		if s.causes.NeedsCause(m.i, code) {
			e.Cause = s.a.rootCause(s.byHost[rp.p.Host.Name], rp)
		}
		e.Seen = s.a.r.now()
		s.act(s.causes.Exited(e))
	}
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
		s.stop(attemptOutcome{kind: outcomeHostLost, err: errors.New(a.Reason), exitCode: a.Code}, a.Reason)
	case cause.Succeeded:
		s.stop(succeeded(), s.a.successNote(s.procs))
	}
	switch due, ok := s.causes.Next(); {
	case !ok:
		s.causeAt, s.causeDue = nil, time.Time{}
	case !due.Equal(s.causeDue):
		s.causeAt, s.causeDue = time.After(due.Sub(s.a.r.now())), due
	}
}

// drainWorkers acts on every worker report already queued.
func (s *supervisor) drainWorkers() {
	for {
		select {
		case wm := <-s.workers:
			s.onWorkerExit(wm)
		default:
			return
		}
	}
}

// wait watches the group until every started process has exited, and
// returns how the attempt ended.
func (s *supervisor) wait(ctx context.Context) attemptOutcome {
	hard, abort := s.a.r.opts.Hard, s.a.r.abort
	ctxDone := ctx.Done()
	ping := time.NewTicker(heartbeatEvery)
	defer ping.Stop()
	var hangCheck <-chan time.Time
	if timeout := s.a.cfg.Job.HangTimeout; timeout > 0 {
		t := time.NewTicker(hangCheckEvery(timeout))
		defer t.Stop()
		hangCheck = t.C
	}
	s.lastPing = s.a.r.mono()
	for s.remaining > 0 {
		select {
		case <-hangCheck:
			s.checkHang()
		case h := <-s.health:
			s.onHealth(h)
		case <-s.stacksDone:
			s.stacksDone = nil
			if s.killAt == nil && s.abandonAt == nil {
				s.requestStop("hung")
			}
		case m := <-s.exits:
			s.checkPaused()
			s.onExit(m)
		case wm := <-s.workers:
			s.onWorkerExit(wm)
		case <-s.causeAt:
			due := s.causeDue
			s.causeAt, s.causeDue = nil, time.Time{}
			s.act(s.causes.Tick(due))
		case <-ctxDone:
			ctxDone = nil
			if s.handOver(ctx) {
				continue
			}
			if s.stacksDone != nil {
				s.stacksDone = nil
				s.requestStop("")
			}
			s.stop(interrupted(), "interrupted")
			// An interruption wins over whatever ended the attempt.
			out := interrupted()
			s.out = &out
			s.causes.Stopping(true)
		case <-hard:
			hard = nil
			s.kill("killing every process now")
		case <-abort:
			abort = nil
			s.stop(interrupted(), "drover stop --abort")
			s.kill("killing every process now (drover stop --abort)")
		case <-s.killAt:
			s.killAt = nil
			s.kill("grace period over; killing what is left")
		case <-ping.C:
			s.checkPaused()
			s.ping()
		case <-s.abandonAt:
			// Unreachable hosts never report back; closing the channels
			// makes their agents stop on their own when they can.
			s.a.r.events.printf("%s: %d process(es) did not report their exit; closing their connections", s.a.prefix(), s.remaining)
			s.cancel()
			s.abandonAt = nil
		}
	}
	for _, rp := range s.procs {
		rp.ctl.Close()
	}
	s.stopWaits.Wait()
	if s.out == nil {
		return attemptOutcome{kind: outcomeFailed, exitCode: -1, err: errors.New("the group ended without meeting the success policy")}
	}
	return *s.out
}

// checkPaused notices that drover itself sent no heartbeat for about
// heartbeatTimeout (it was stopped with Ctrl-Z, or starved): the agents
// then stop their groups on their own, and the exits that follow are not
// the job's failure. Such an attempt ends as a lost host would: it counts
// against max_host_failures, not max_restarts.
func (s *supervisor) checkPaused() {
	gap := s.a.r.mono() - s.lastPing
	if s.stopping || gap < heartbeatTimeout-heartbeatEvery {
		return
	}
	if s.a.r.detachedGroup {
		s.letGo(fmt.Sprintf("this supervisor was silent for %s (suspended, or the machine slept)", gap.Round(time.Second)))
		return
	}
	reason := fmt.Sprintf("controller stopped sending heartbeats for %s (drover was suspended, e.g. by Ctrl-Z, or starved); the agents stop their groups after %s",
		gap.Round(time.Second), heartbeatTimeout)
	s.stop(attemptOutcome{kind: outcomeHostLost, err: errors.New(reason), exitCode: -1}, reason)
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
