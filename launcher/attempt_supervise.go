package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/cause"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/logstream"
	"github.com/droverhq/drover/launcher/notify"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/restart"
	"github.com/droverhq/drover/launcher/straggler"
)

// Supervising an attempt's group, the floor above the supervisor's own
// files (supervisor.go: its state and its stop; firstevent.go and
// supervisor_watch.go: what it watches): the supervisor made, every
// process started, and the loop that waits for the group to end
// (supervisor.wait), which calls into all of them. What the supervisor
// asks of the attempt (the processes' environment and files) is in
// attempt.go, below it.

// supervise runs the attempt's group to its end.
func (a *attempt) supervise(ctx context.Context, conns []*attemptHost, pl *plan.Plan) attemptOutcome {
	a.r.logFail.makeDir(a.logDir)
	s := newSupervisor(a, conns, pl)
	s.ctx = ctx
	if a.judgesStart() {
		s.causes.HoldStartFailures(a.r.now().Add(cause.StartWindow), cause.StartSettle)
	}
	defer s.cancel()
	s.start()
	if !s.stopping {
		s.announceRunning(conns)
	}
	if a.cfg.Job.HangTimeout > 0 {
		go s.watchProgressFiles(s.sessions)
	}
	if a.cfg.Job.Health != config.HealthOff {
		s.watchHealth(s.sessions, s.health)
	}
	go watchStragglers(s.sessions, a, s.procs, s.byHost, newReplacer(s))
	return s.wait(ctx)
}

// judgesStart says whether the start-up failure rule may stop the run
// after this attempt (restart.SameStartFailure), so that its failures at
// start wait for the others' (cause.HoldStartFailures): the run's first
// attempt, with restarts to spare under restart_policy "on-failure".
func (a *attempt) judgesStart() bool {
	p := a.cfg.Job.RestartPolicy
	return a.n == a.r.firstAttempt && a.adopt == nil && a.cfg.Job.MaxRestarts > 0 && (p == "" || p == config.RestartOnFailure)
}

func newSupervisor(a *attempt, conns []*attemptHost, pl *plan.Plan) *supervisor {
	s := &supervisor{a: a, pl: pl, byHost: map[string]*attemptHost{}, exits: make(chan exitMsg, len(pl.Processes)),
		workers: make(chan workerMsg, 64),
		health:  make(chan healthRead), warned: map[string]bool{}, replace: make(chan straggler.Finding),
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
			at := s.a.r.now()
			s.exits <- exitMsg{i: i, err: recordedExit(s.a, s.byHost[r.rp.p.Host.Name], r.rp, err), at: at}
		}()
	}
	s.remaining = len(s.procs)
	s.a.r.events.debugf("%s: setup: processes started", s.a.prefix())
	s.a.r.events.printf("%s: started %d process(es) on %d host(s)", s.a.prefix(), len(s.procs), len(s.byHost))
	if startErr == nil {
		s.a.r.events.notify(notify.Event{Kind: notify.Started, Attempt: s.a.n,
			Message: fmt.Sprintf("started %d process(es) on %d host(s)", len(s.procs), len(s.byHost))})
	}
	if startErr != nil {
		// Told once, as setupFailure's: by the run loop when the run goes
		// on, by the summary when it ends on it.
		s.a.r.events.debugf("%s: %v", s.a.prefix(), startErr)
		out := setupFailed(startErr)
		out.untold = true
		s.stop(out, "")
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
	var health string
	if s.watchers[p.Host.Name] == p.Name() {
		health = healthFile(remoteAbs(c.home, c.host.Workdir), a.n)
	}
	ro := a.agentOptions(c, p, health)
	cmd := cluster.Cmd{Dir: p.Workdir, Stdin: io.MultiReader(bytes.NewReader(envLine), rp.ctl), Stdout: stdout, Stderr: stderr}
	var proc cluster.Process
	if a.adopt != nil {
		proc, err = c.client().Attach(s.sessions, a.attachOptions(c, p, localLog), cmd)
	} else {
		proc, err = c.client().Run(s.sessions, ro, cmd)
	}
	if err != nil {
		rp.closeLogs()
		return nil, nil, fmt.Errorf("start %s on %s: %w", p.Name(), hostLabel(p.Host), err)
	}
	return rp, proc, nil
}

// agentOptions are the options of p's agent on c (agent.RunOptions),
// with health, when set, the file it writes the host's GPU health to.
func (a *attempt) agentOptions(c *attemptHost, p plan.Process, health string) agent.RunOptions {
	wd := remoteAbs(c.home, p.Workdir)
	ro := agent.RunOptions{
		HealthFile: health, HealthEvery: healthEvery, GPULeases: a.ph.plan.leaseFiles(c.host.Name), // held as long as the processes run
		Grace:   a.cfg.Job.StopGrace,
		PIDFile: path.Join(wd, pidDir, p.Name()+".pid"),
		LogFile: path.Join(wd, hostio.ForegroundLog(a.n, p.Name())),
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
		WatchWorkers: a.cfg.Job.Framework == config.Torchrun,
	}
	ro.RunID, ro.Attempt, ro.Rank, ro.Name = a.r.runID, a.n, p.Rank, p.Name()
	if a.r.detachedGroup {
		ro.State, ro.LogFile = a.processFiles(c, p.Name())
		ro.ControllerTimeout = a.r.controllerTimeout(a.cfg)
	} else if st, _ := a.processFiles(c, p.Name()); path.IsAbs(st) {
		// Recorded as a detached process is, so that status, logs,
		// stop and ps find it from any terminal (its log stays where a
		// foreground run's is), and read when the channel closes
		// without the exit status (recordedExit).
		ro.State, ro.Attached = st, true
	} else {
		// The agent's own record of the exit, read when the channel
		// closes without it (recordedExit).
		ro.Record = st
	}
	if p.Container != "" {
		// Stopped by name and removed when the agent ends.
		ro.Container, ro.ContainerRuntime = p.Container, string(a.cfg.Job.Container.Runtime)
	}
	return ro
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
	s.a.ends = append(s.a.ends, restart.End{Code: code, Tail: rp.stderrTail.String(), AfterStop: s.stopping})
	if how, died := agentDied(m.err); died {
		s.stopLeftBy(rp, how)
	}
	switch {
	case m.err == nil:
		s.act(s.causes.Finished(m.i, m.at, len(s.procs) == len(s.pl.Processes) && s.succeeded(s.procs)))
	case lost:
		if c := s.byHost[rp.p.Host.Name]; !s.stopping && (c == nil || !s.a.r.pool.redialed(c.hostConn)) {
			// A host redialled to read its agent's record
			// (recordedExit) answers: not lost, only its connection.
			s.a.r.noteLost(rp.p.Host.Name)
		}
		s.act(s.causes.HostLost(m.i, m.at, fmt.Sprintf("%s lost: %v", hostLabel(rp.p.Host), m.err)))
	default:
		e := cause.Exit{Proc: m.i, At: m.at, Status: text, Code: code}
		if s.causes.NeedsCause(m.i, code) {
			e.Cause = processCause(s.byHost[rp.p.Host.Name], rp)
		}
		e.Seen = s.a.r.now()
		s.act(s.causes.Exited(e))
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
	hard, abort, regrow := s.a.r.opts.Hard, s.a.r.abort, s.a.regrow
	ctxDone := ctx.Done()
	ping := time.NewTicker(heartbeatEvery)
	defer ping.Stop()
	hangCheck, stopHangCheck := hangTicker(s.a.cfg.Job.HangTimeout)
	defer stopHangCheck()
	s.lastPing = s.a.r.mono()
	for s.remaining > 0 {
		select {
		case <-hangCheck:
			s.checkHang()
		case h := <-s.health:
			s.onHealth(h)
		case v := <-s.verdict:
			tellVerdict(s, v)
		case f := <-s.replace:
			replaceStraggler(s, f)
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
			if s.stacksDone != nil || s.verdict != nil {
				s.stacksDone, s.verdict = nil, nil
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
		case h := <-regrow:
			regrow = nil
			s.stop(regrowOutcome(h, len(s.pl.Hosts)+1, s.a.r.newestCheckpoint()))
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
		s.a.reported = s.a.reported || rp.reported.Load()
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

// regrowOutcome ends an attempt to take host back into the group
// (regrow = "checkpoint"), which then has hosts hosts and resumes from
// checkpoint, and says why.
func regrowOutcome(host string, hosts int, checkpoint string) (attemptOutcome, string) {
	why := fmt.Sprintf("%s answers again and a new checkpoint is complete: restarting the group to take it back (regrow = \"checkpoint\")", host)
	return attemptOutcome{kind: outcomeRegrow, exitCode: -1, err: errors.New(why),
		plan: restart.Plan{Host: host, Hosts: hosts, Checkpoint: checkpoint}}, why
}

// hangTicker ticks for checkHang when hang_timeout is set; with none it
// never ticks (a nil channel).
func hangTicker(timeout time.Duration) (<-chan time.Time, func()) {
	if timeout <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(hangCheckEvery(timeout))
	return t.C, t.Stop
}
