package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/container"
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/notify"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/restart"
	"github.com/droverhq/drover/launcher/setup"
)

// Run supervises the job until it succeeds, fails for good or ctx is
// cancelled. Each attempt re-reads the job and inventory files and
// re-resolves every host, so an edited address takes effect at the next
// restart. A returned error means the job could not be started at all
// (configuration, connection); failures of the training itself are in
// Result.
func Run(ctx context.Context, opts RunOptions) (*Result, error) {
	r := newRunner(opts)
	return r.run(ctx)
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	cfg, err := r.opts.load()
	if err != nil {
		return nil, err
	}
	res := &Result{}
	if res.LogDir, err = r.openLogs(cfg); err != nil {
		return nil, err
	}
	r.runLogDir = res.LogDir
	defer func() {
		if r.events.file != nil {
			r.events.file.Close()
		}
	}()
	defer r.events.startNotify(cfg, func() string { return r.runID })() // before events.log closes: the last event is told there

	// Deferred first, so it runs last: the leases are given back over
	// these connections.
	defer r.pool.closeAll()
	// The last attempt's GPU leases, kept for a restart, go back when
	// the run ends, over the connections still open.
	defer r.keptGPUs.release()
	var releaseLeases func()
	ctx, r.leases, releaseLeases = startLeases(ctx, cfg.Job.Name, r.now(), r.opts.Force, r.events)
	defer releaseLeases()
	ctx, stopRequested := context.WithCancelCause(ctx)
	defer stopRequested(nil)
	r.runRec = agent.RunRecord{RunID: r.runID, Job: cfg.Job.Name, State: agent.RunStarting,
		SupervisorHost: supervisorHost(), SupervisorPid: os.Getpid(), SupervisorVersion: agent.Version(), Started: r.now().UTC()}
	r.detachedGroup = r.opts.Detach
	if !r.opts.Detach {
		r.lookFirst = true // the first attempt looks, beside its setup
	} else if ad, _ := r.findAdoptable(ctx, cfg); ad != nil {
		r.adopt(ad, res)
		r.adopting, r.detachedGroup = ad, true
	} else {
		_ = os.WriteFile(filepath.Join(res.LogDir, runIDFile), []byte(r.runID+"\n"), 0o644)
	}
	r.watchStopRequest(ctx, stopRequested)
	res, err = r.attempts(ctx, cfg, res)
	if handedOver(ctx) {
		return res, err
	}
	if res == nil {
		r.setRecord(nil, func(rec *agent.RunRecord) { rec.State = agent.RunFailed })
		return res, err
	}
	r.setRecord(nil, func(rec *agent.RunRecord) { endRecord(rec, res) })
	return res, err
}

// attempts runs the job's attempts until one ends the run.
func (r *runner) attempts(ctx context.Context, cfg *config.Config, res *Result) (*Result, error) {

	var b restart.Budget
	var stuck restart.Breaker
	first := firstRestart(r.opts, r.events, cfg)
	start := 1
	if ad := r.adopting; ad != nil {
		start, first, b.Restarts = ad.rec.Attempt, 0, ad.rec.Restarts
	}
	r.firstAttempt = start
	for n := start; ; n++ {
		res.Attempts = n
		if n > start {
			cfg = r.reload(cfg, n, b.Total(cfg.Job))
		}
		total := b.Total(cfg.Job)
		a := &attempt{r: r, cfg: cfg, n: n, total: total, restarts: first + b.Used(),
			logDir: filepath.Join(res.LogDir, fmt.Sprintf("attempt-%d", n))}
		a.adopt, r.adopting = r.adopting, nil
		saveRestart(r.opts, r.events, cfg, a.restarts)
		out := a.run(ctx)
		if out.kind == outcomeAdoptable {
			if ad, _ := r.findAdoptable(ctx, cfg); ad != nil {
				r.adopt(ad, res)
				r.adopting, r.detachedGroup = ad, true
				return r.attempts(ctx, cfg, res)
			}
			r.events.printf("the hosts' newest run record is not final, but no process of that run is left: starting a new group")
			n-- // the same attempt, set up again
			continue
		}
		if lost := lostLease(ctx, out.err); lost != nil {
			return r.finish(res, Failed, lost), nil
		}
		if out.kind == outcomeFenced && ctx.Err() == nil {
			// A spare stands in for a host the health gate kept out:
			// the same attempt again, not a restart.
			n--
			continue
		}
		if out.kind != outcomeSucceeded && ctx.Err() == nil {
			r.stopAsked() // a stop that made this failure ends the run (see stopAsked)
		}
		if ctx.Err() != nil && out.kind != outcomeSucceeded {
			// Ctrl-C during setup surfaces as a failed connect, push or
			// preflight; it is an interruption all the same.
			out = interrupted()
		}
		switch {
		case out.kind == outcomeSetupFailed && n == start && (config.IsConfigError(out.err) || IsHeld(out.err)):
			return nil, out.err
		case out.kind == outcomeInterrupted:
			r.events.printf("interrupted: every process stopped")
			return r.finish(res, Interrupted, context.Cause(ctx)), nil
		case out.kind == outcomeSucceeded:
			r.events.printf("attempt %d/%d: job %s succeeded", n, total, cfg.Job.Name)
			return r.finish(res, Succeeded, nil), nil
		}
		if out.reattach {
			if r.adopting = r.waitReattach(ctx, cfg, n); r.adopting != nil {
				n-- // the same attempt, attached again
				continue
			}
		}
		if end := r.again(ctx, res, cfg, &b, &stuck, a, out); end != nil {
			return end, nil
		}
	}
}

// again decides, after attempt a failed with out, whether the run goes
// on: it spends a restart (or ends the run past max_restarts,
// max_host_failures or max_restarts_without_progress), makes sure every
// lease is still this run's, and waits the backoff. A non-nil Result ends
// the run with it.
func (r *runner) again(ctx context.Context, res *Result, cfg *config.Config, b *restart.Budget, stuck *restart.Breaker, a *attempt, out attemptOutcome) *Result {
	// An adopted run's first attempt is its first here.
	err := b.Spend(cfg.Job, out.policy(), a.n-r.firstAttempt+1)
	if err == nil {
		pp := a.progress.policy()
		pp.Planned = out.kind.Planned()
		err = stuck.Judge(cfg.Job.MaxRestartsWithoutProgress, pp, out.err)
	}
	if err == nil && out.kind == outcomeFailed && a.judgesStart() {
		if why := restart.SameStartFailure(cfg.Job, a.ends, a.progress.newer || a.reported); why != nil {
			err = fmt.Errorf("%v; not restarting: %w", out.err, why)
		}
	}
	if err != nil {
		if out.untold {
			// The summary says it, once.
			r.events.debugf("job %s failed: %v", cfg.Job.Name, err)
		} else {
			r.events.printf("job %s failed: %v", cfg.Job.Name, err)
		}
		return r.finish(res, Failed, err)
	}
	if out.untold {
		r.events.printf("%s: %v", a.prefix(), out.err)
	}
	check := a.leaseCheck
	if check == nil {
		check = func() error { return checkLeases(ctx, r.leases, r.events) }
	}
	if lost := check(); lost != nil {
		return r.finish(res, Failed, lost)
	}
	r.setRecord(nil, func(rec *agent.RunRecord) { rec.State = agent.RunRestarting })
	delay := restart.Backoff(cfg.Job, b.Used())
	if out.kind.Planned() {
		delay = 0 // not a failure: nothing to back off from
	}
	r.events.printf("attempt %d/%d: restarting the whole group in %s", a.n+1, b.Total(cfg.Job), delay.Round(time.Millisecond))
	a.notifyRestart(out, delay)
	if err := r.sleep(ctx, delay); err != nil {
		if lost := lostLease(ctx, nil); lost != nil {
			return r.finish(res, Failed, lost)
		}
		return r.finish(res, Interrupted, context.Cause(ctx))
	}
	if delay == 0 {
		// No backoff: the check above is as old as the stop, and the
		// next attempt's lease finds a takeover since; another check
		// would cost every restart a round trip to every host.
		return nil
	}
	if lost := checkLeases(ctx, r.leases, r.events); lost != nil {
		return r.finish(res, Failed, lost)
	}
	return nil
}

// finish fills in how the run ended and the summary, and writes the
// summary to events.log too: the terminal that should show it may be
// gone (`drover run ... 2>&1 | head -1`). The end is notified (finished,
// failed, stopped).
func (r *runner) finish(res *Result, o Outcome, err error) *Result {
	res.Outcome, res.Err = o, err
	r.mu.Lock()
	res.Processes = r.table.summaries()
	r.mu.Unlock()
	r.events.summary(res)
	ev := notify.Event{Kind: notify.Finished, Attempt: res.Attempts, Checkpoint: r.newestCheckpoint(),
		Message: fmt.Sprintf("job %s succeeded after %d attempt(s)", r.runRec.Job, res.Attempts)}
	switch o {
	case Failed:
		ev.Kind, ev.Message = notify.Failed, fmt.Sprintf("job %s failed: %v", r.runRec.Job, err)
		if root, ok := firstCause(res.Processes, time.Time{}); ok {
			withRoot(&ev, root)
		}
	case Interrupted:
		ev.Kind, ev.Message = notify.Stopped, fmt.Sprintf("job %s stopped in attempt %d", r.runRec.Job, res.Attempts)
		if err != nil {
			ev.Message += ": " + err.Error()
		}
	}
	r.events.notify(ev)
	return res
}

// withRoot names the root cause's process in ev, and gives its cause as
// the summary's "root cause" line says it unless ev has one (the
// attempt's error, which has the exit status too).
func withRoot(ev *notify.Event, root ProcSummary) {
	if ev.RootCause == "" {
		ev.RootCause = root.Name + " on " + root.Host + ": " + root.Cause
	}
	ev.Host, ev.Process, ev.Rank, ev.HasRank = root.Host, root.Name, root.Rank, root.Rank >= 0
}

// notifyRestart tells that attempt a, which ended with out, is followed
// by another: the root cause is the first process's end when the group
// ran and failed, else what ended the attempt (a hang, a setup failure);
// a planned restart (a straggler replaced, a regrow) says what drover did
// instead (restart.Restarted).
func (a *attempt) notifyRestart(out attemptOutcome, delay time.Duration) {
	r := a.r
	ev := notify.Event{Kind: notify.Restarted, Attempt: a.n, Checkpoint: r.newestCheckpoint()}
	ev.Message, ev.RootCause = restart.Restarted(out.kind, a.n, delay, out.plan, out.err)
	if out.kind.Planned() {
		ev.Host = out.plan.Host
		if out.plan.Checkpoint != "" {
			ev.Checkpoint = out.plan.Checkpoint
		}
	}
	if out.kind == outcomeFailed || out.kind == outcomeHostLost {
		r.mu.Lock()
		root, ok := firstCause(r.table.summaries(), a.started)
		r.mu.Unlock()
		if ok {
			withRoot(&ev, root)
		}
	}
	r.events.notify(ev)
}

// load reads the job and inventory and applies RunOptions.Adjust, so
// that every reading (the first, a restart's, a redial's) is adjusted
// alike.
func (o RunOptions) load() (*config.Config, error) {
	cfg, err := config.Load(o.JobPath, o.loadOptions())
	if err != nil || o.Adjust == nil {
		return cfg, err
	}
	if err := o.Adjust(cfg); err != nil {
		return nil, fmt.Errorf("adjust %s: %w", cfg.Path, err)
	}
	return cfg, nil
}

// reload re-reads the job and inventory before a restart; a file that no
// longer loads leaves the previous configuration in force.
func (r *runner) reload(cfg *config.Config, attempt, total int) *config.Config {
	next, err := r.opts.load()
	if err != nil {
		r.events.printf("attempt %d/%d: re-reading %s failed, keeping the previous configuration: %v", attempt, total, cfg.Path, err)
		return cfg
	}
	return next
}

// openLogs creates runs/<job>-<start>/ and its events.log, and returns
// the directory.
func (r *runner) openLogs(cfg *config.Config) (string, error) {
	start := r.now()
	logDir := LogRoot(cfg, r.opts.LogDir)
	r.logRoot = logDir
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return "", fmt.Errorf("create log directory: %w", err)
	}
	// Two runs of a job started within the same second get distinct
	// directories (-2, -3, ...) rather than overwriting each other's logs.
	base := filepath.Join(logDir, fmt.Sprintf("%s-%s", cfg.Job.Name, start.Format("20060102-150405")))
	for n := 1; ; n++ {
		dir := base
		if n > 1 {
			dir = fmt.Sprintf("%s-%d", base, n)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			r.events.file, _ = os.Create(filepath.Join(dir, "events.log"))
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) || n >= 1000 {
			return "", fmt.Errorf("create log directory: %w", err)
		}
	}
}

// run is the attempt, phase by phase (see attempt).
func (a *attempt) run(ctx context.Context) attemptOutcome {
	a.started = a.r.now()
	hosts, err := a.r.replaced.participants(a.cfg)
	if err != nil {
		return a.setupFailure(err)
	}
	a.ph = newPhases(a)
	defer a.ph.cleanup()
	st := &attemptState{hosts: hosts, steps: a.stepTimer(), scan: a.ph.push.scan()}
	defer func() { <-st.scan.done }() // nothing of the attempt outlives it
	// The connections are the runner's (connPool): they outlive the
	// attempt, and the next one reuses them.
	if err := runPhase(ctx, a.ph.connect, st); err != nil {
		return a.connectFailure(ctx, err)
	}
	adoptable := func() bool { return false }
	if a.r.lookFirst {
		a.r.lookFirst = false
		adoptable = lookForGroup(ctx, st.pooled)
	}
	err = runPhase(ctx, a.ph.prepare, st)
	found := adoptable()
	if err != nil {
		<-st.installed
		return a.setupFailure(err) // a *lease.HeldError says the run must not go on
	}
	if found {
		<-st.installed
		return attemptOutcome{kind: outcomeAdoptable} // see runner.attempts
	}
	if a.adopt != nil {
		return a.adoptGroup(ctx, st)
	}
	err = runPhase(ctx, a.ph.container, st)
	if err == nil {
		err = runPhase(ctx, a.ph.check, st)
	}
	var ue *UnhealthyError
	if errors.As(err, &ue) && ctx.Err() == nil {
		return a.keepOut(ue)
	}
	if err != nil {
		out := a.setupFailure(err)
		// A failed setup fails the same way again: fix it, run again.
		out.permanent = ctx.Err() == nil && (errors.As(err, new(*setup.Error)) || errors.As(err, new(*container.Error)))
		return out
	}
	if err := runPhase(ctx, a.ph.data, st); err != nil {
		return a.setupFailure(err)
	}
	if ctx.Err() != nil {
		return interrupted()
	}
	return a.supervised(ctx, st.conns, st.plan)
}

// supervised runs the planned group to its end with its checkpoints
// copied meanwhile, and after a failure learns what the breaker needs and
// waits for the GPUs to be released.
func (a *attempt) supervised(ctx context.Context, conns []*attemptHost, pl *plan.Plan) attemptOutcome {
	a.progress.ran = true
	a.noteMembership(pl)
	stopWatch := a.ph.ckpt.watch(ctx, conns)
	stopRegrow := a.watchRegrow(ctx)
	out := a.supervise(ctx, conns, pl)
	stopRegrow()
	stopWatch()
	if out.kind != outcomeSucceeded && out.kind != outcomeInterrupted {
		a.ph.ckpt.checkProgress(ctx, conns)
		a.waitGPUsReleased(ctx, conns, pl)
		gatherFlightRecorder(a, conns, pl)
	}
	if out.kind == outcomeSetupFailed {
		a.r.pool.forgetPrepared()
	}
	return out
}

// watchRegrow starts regrow = "checkpoint"'s watch (connectPhase.watchRegrow)
// over the run's checkpoint record, into a.regrow.
func (a *attempt) watchRegrow(ctx context.Context) (stop func()) {
	if a.cfg.Job.Regrow != config.RegrowCheckpoint {
		return func() {}
	}
	rec, err := a.r.checkpointRecord(a.r.logRoot, a.cfg.Job.Name)
	if err != nil {
		return func() {}
	}
	newest := func() int {
		n := 0
		for _, e := range rec.Entries() {
			n = max(n, e.Seq)
		}
		return n
	}
	a.regrow, stop = a.ph.connect.watchRegrow(ctx, newest)
	return stop
}

// newPhases makes a's phases: this is where the run's parts are handed to
// each phase, so that no phase holds the runner.
func newPhases(a *attempt) phases {
	r := a.r
	env := phaseEnv{n: a.n, total: a.total, cfg: a.cfg, events: r.events}
	ph := phases{
		connect: &connectPhase{phaseEnv: env, clock: clock{now: r.now, sleep: r.sleep}, dial: sshDialer{}, opts: r.opts.Dial,
			pool: r.pool, lost: r.takeLost, replaced: r.replaced, agents: r.agents, left: r.left, full: func() *plan.Plan { return r.fullPlan },
			fenced: func(h string) bool { _, bad := r.fencedFor(h); return bad },
			reload: r.opts.load},
		prepare: &preparePhase{phaseEnv: env, agents: r.agents, opts: r.opts.Dial, dial: sshDialer{}, pool: r.pool, leases: r.leases},
		push:    &pushPhase{phaseEnv: env, now: r.now, logRoot: r.logRoot, cacheDir: r.opts.PushCacheDir},
		setup:   &setupPhase{phaseEnv: env, out: r.opts.Out, quiet: r.opts.Quiet, runDir: r.runLogDir, done: &r.setUp},
		ckpt:    &ckptPhase{phaseEnv: env, now: r.now, record: func(job string) (*checkpoint.Record, error) { return r.checkpointRecord(r.logRoot, job) }, progress: &a.progress, fresh: r.opts.Fresh, since: &r.freshSince, runID: r.runID, runDir: r.runLogDir},
		plan: &planPhase{phaseEnv: env, restarts: a.restarts, runID: r.runID, prevWorld: r.lastWorld, fenced: r.fencedFor, findings: a.findings, warn: a.warn,
			leasing: gpuLeasing{off: len(r.opts.Allocation) > 0, dir: gpulease.DefaultDir, runID: r.runID, queue: r.opts.Queue, timeout: r.opts.QueueTimeout},
			queued:  queueNote(r, a.n),
			kept:    &r.keptGPUs},
		container: &containerPhase{phaseEnv: env, done: &r.imaged},
		preflight: &preflightPhase{phaseEnv: env, leases: r.leases},
		data:      &dataPhase{phaseEnv: env, staged: &r.dataStaged},
	}
	ph.check = &checkPhase{push: ph.push, setup: ph.setup, ckpt: ph.ckpt, plan: ph.plan, preflight: ph.preflight}
	return ph
}
