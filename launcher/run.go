package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/lease"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/restart"
)

// RunOptions configures a supervised run of a job.
type RunOptions struct {
	JobPath       string
	InventoryPath string
	// LogDir is where runs/<job>-<start>/ goes; default: "runs" next to
	// the job file.
	LogDir string
	// AgentBinary is the running drover binary (usually os.Executable());
	// hosts get it, or the agent for their platform found beside it
	// (remote.FindAgents), as the per-process supervisor.
	AgentBinary string
	Dial        cluster.DialOptions
	// Out receives every process's output, one prefixed line at a time.
	Out io.Writer
	// Events receives drover's own one-line, timestamped events.
	Events io.Writer
	// Quiet hides process output on Out (log files still get all of it).
	Quiet bool
	// Hard is closed when the user insists (second Ctrl-C): processes are
	// killed at once instead of being given their grace period.
	Hard <-chan struct{}
	// Now is the wall clock (nil: time.Now): it stamps events, causes
	// and the log directory's name; one test freezes it. Hangs and
	// heartbeats are measured on the monotonic clock whatever Now says.
	Now func() time.Time
	// Sleep waits out the restart backoff, a lost host's redial and a
	// detached run's re-attach (nil: a timer that ctx cuts short).
	// Nothing sets it today.
	Sleep func(ctx context.Context, d time.Duration) error
	// Env is extra environment for every process, after the plan's; tests
	// use it, users use [job.env].
	Env map[string]string
	// PushCacheDir is push.Options.CacheDir for the push before each
	// attempt: with it, a restart re-hashes only the files that changed.
	PushCacheDir string
	// Force takes over workdirs that another live run holds (see package
	// lease); that run then stops.
	Force bool

	// Inside a Slurm allocation (see slurm.go): its hosts, the job id and
	// SLURM_RESTART_COUNT (RestartOffset), from which the restart count
	// continues across a requeue.
	Allocation    []config.Host
	SlurmJobID    string
	RestartOffset int

	// Detach runs the job as a detached run (see detached.go): its agents
	// outlive this process, its state is kept on the hosts.
	Detach bool
	// RunID names a detached run (default: NewRunID).
	RunID string
	// Ready, for a detached run, is called once every process of the
	// first attempt that started them all runs.
	Ready func(runID, logDir string)

	// peerLostSettle replaces cause.PeerLostSettle, the hold of a failure
	// that reads as a lost peer, in tests (0: that constant).
	peerLostSettle time.Duration
}

// Outcome is how a run ended.
type Outcome int

// The ways a run ends; the CLI maps them to exit statuses 0, 1 and 130.
const (
	Succeeded Outcome = iota
	Failed
	Interrupted
)

// Result summarises a finished run.
type Result struct {
	Outcome  Outcome
	Attempts int
	// LogDir is runs/<job>-<start> with one attempt-<n>/ per attempt.
	LogDir    string
	Processes []ProcSummary
	// Err says why a failed run failed for good.
	Err error
}

// ProcSummary is one row of the end-of-run table.
type ProcSummary struct {
	Name     string
	Host     string
	Attempts int
	Exit     string
	Duration time.Duration
	// Cause is why its last attempt failed: the exception from its error
	// file, or the end of its stderr; a torchrun worker's death; an exit
	// 0 while others still ran. CauseAt is when drover saw it: the
	// earliest cause of the run's last attempt is its root cause, the
	// others (victims) come after it.
	Cause   string
	CauseAt time.Time
}

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

type runner struct {
	opts RunOptions
	now  func() time.Time
	// mono is the time since the run started on the monotonic clock,
	// which a step of the wall clock does not move: what measures how
	// long something took or was silent (hangs, heartbeats) reads it.
	mono   func() time.Duration
	sleep  func(ctx context.Context, d time.Duration) error
	events *eventLog
	// agents are the binaries hosts get as their agent (found once, next
	// to opts.AgentBinary). Finding them hashes each (tens of
	// milliseconds), so it runs beside the config, the scan and the dials
	// rather than before them; the installs wait for it.
	agents func() remote.Agents

	mu       sync.Mutex
	table    procTable    // the summary, under mu
	replaced replacements // unreachable host name -> spare name
	// logRoot is the directory holding every run's logs (runs/).
	logRoot string
	// leases are this run's hold on the hosts' workdirs.
	leases *lease.Holder
	// pool keeps the connections from one attempt to the next.
	pool *connPool
	// lastHosts and lastWorld are the hosts and world size of the last
	// attempt that got as far as its plan (see noteMembership).
	lastHosts []string
	lastWorld int
	// logFail: a failing local log disk is reported once per run.
	logFail *logFailure
	ckptState
	lostState
	detachState
	healthState
}

func newRunner(opts RunOptions) *runner {
	r := &runner{opts: opts, table: procTable{procs: map[string]*ProcSummary{}}, replaced: replacements{}, pool: newConnPool()}
	found := make(chan remote.Agents, 1)
	go func() { found <- remote.FindAgents(opts.AgentBinary) }()
	r.agents = sync.OnceValue(func() remote.Agents { return <-found })
	// One read of known_hosts and the ssh config shared by every attempt's
	// dials, so that what drover skips is warned about once per run.
	r.opts.Dial = r.opts.Dial.Shared()
	start := time.Now()
	r.mono = func() time.Duration { return time.Since(start) }
	r.now = opts.Now
	if r.now == nil {
		r.now = time.Now
	}
	r.sleep = opts.Sleep
	if r.sleep == nil {
		r.sleep = sleepCtx
	}
	ev := opts.Events
	if ev == nil {
		ev = io.Discard
	}
	r.events = &eventLog{w: ev, now: r.now}
	r.logFail = &logFailure{events: r.events}
	r.abort = make(chan struct{})
	r.runID = opts.RunID
	if r.runID == "" {
		r.runID = NewRunID(r.now())
	}
	if r.opts.Out == nil {
		r.opts.Out = io.Discard
	}
	return r
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	cfg, err := config.Load(r.opts.JobPath, r.opts.loadOptions())
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

	// Deferred first, so it runs last: the leases are given back over
	// these connections.
	defer r.pool.closeAll()
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
	r.setRecord(nil, func(rec *agent.RunRecord) { rec.State = finalState(res.Outcome) })
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
		err = stuck.Judge(cfg.Job.MaxRestartsWithoutProgress, a.progress.policy(), out.err)
	}
	if err != nil {
		r.events.printf("job %s failed: %v", cfg.Job.Name, err)
		return r.finish(res, Failed, err)
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
	r.events.printf("attempt %d/%d: restarting the whole group in %s", a.n+1, b.Total(cfg.Job), delay.Round(time.Millisecond))
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
// gone (`drover run ... 2>&1 | head -1`).
func (r *runner) finish(res *Result, o Outcome, err error) *Result {
	res.Outcome, res.Err = o, err
	r.mu.Lock()
	res.Processes = r.table.summaries()
	r.mu.Unlock()
	r.events.summary(res)
	return res
}

// reload re-reads the job and inventory before a restart; a file that no
// longer loads leaves the previous configuration in force.
func (r *runner) reload(cfg *config.Config, attempt, total int) *config.Config {
	next, err := config.Load(r.opts.JobPath, r.opts.loadOptions())
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

// register adds p to the summary in plan order.
func (r *runner) register(p plan.Process) *ProcSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.table.registerLocked(p)
}

// procTable is the end-of-run summary's rows, by process name in plan
// order; the runner's mu guards it.
type procTable struct {
	procs map[string]*ProcSummary
	order []string
}

func (t *procTable) registerLocked(p plan.Process) *ProcSummary {
	key := p.Name()
	s, ok := t.procs[key]
	if !ok {
		s = &ProcSummary{Name: key, Host: p.Host.Name, Exit: "not started"}
		t.procs[key] = s
		t.order = append(t.order, key)
	}
	return s
}

func (r *runner) record(p plan.Process, exit string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.table.registerLocked(p)
	s.Host = p.Host.Name
	s.Attempts++
	s.Exit = exit
	s.Duration += d
	s.Cause = ""
}

// recordCause notes why p's attempt went wrong, and when drover saw it,
// for the summary.
func (r *runner) recordCause(p plan.Process, cause string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.table.registerLocked(p)
	s.Cause, s.CauseAt = cause, at
}

// summaries are the rows (the caller holds the runner's mu).
func (t *procTable) summaries() []ProcSummary {
	out := make([]ProcSummary, 0, len(t.order))
	for _, k := range t.order {
		out = append(out, *t.procs[k])
	}
	return out
}

// RenderSummary writes the end-of-run table.
func RenderSummary(w io.Writer, res *Result) {
	nameW, hostW := len("PROCESS"), len("HOST")
	for _, p := range res.Processes {
		nameW = max(nameW, len(p.Name))
		hostW = max(hostW, len(p.Host))
	}
	if len(res.Processes) > 0 {
		fmt.Fprintf(w, "%-*s  %-*s  %8s  %-14s  %s\n", nameW, "PROCESS", hostW, "HOST", "ATTEMPTS", "EXIT", "DURATION")
	}
	for _, p := range res.Processes {
		fmt.Fprintf(w, "%-*s  %-*s  %8d  %-14s  %s\n", nameW, p.Name, hostW, p.Host, p.Attempts, p.Exit, p.Duration.Round(time.Millisecond))
	}
	writeCauses(w, res.Processes)
	switch res.Outcome {
	case Succeeded:
		fmt.Fprintf(w, "succeeded after %d attempt(s); logs in %s\n", res.Attempts, res.LogDir)
	case Interrupted:
		fmt.Fprintf(w, "interrupted in attempt %d; logs in %s\n", res.Attempts, res.LogDir)
	default:
		fmt.Fprintf(w, "failed after %d attempt(s): %s; logs in %s\n", res.Attempts, cluster.Escape(fmt.Sprint(res.Err)), res.LogDir)
	}
}

// eventLog prints drover's own events, timestamped, to the terminal and to
// events.log in the run's log directory.
type eventLog struct {
	mu   sync.Mutex
	w    io.Writer
	file *os.File
	now  func() time.Time
}

// An event is one line: control characters in it (a newline, an escape
// sequence in a checkpoint name or in a host's output) are escaped, so a
// host can neither forge a line nor drive the terminal.
func (e *eventLog) printf(format string, args ...any) {
	msg := cluster.Escape(strings.TrimRight(fmt.Sprintf(format, args...), "\n"))
	line := e.now().Format("15:04:05.000") + " " + msg + "\n"
	e.mu.Lock()
	defer e.mu.Unlock()
	io.WriteString(e.w, line)
	if e.file != nil {
		io.WriteString(e.file, e.now().Format(time.RFC3339Nano)+" "+msg+"\n")
	}
}

// summary writes the end-of-run table (RenderSummary) to events.log.
func (e *eventLog) summary(res *Result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.file != nil {
		io.WriteString(e.file, e.now().Format(time.RFC3339Nano)+" summary:\n")
		RenderSummary(e.file, res)
	}
}

// debugf writes to events.log only: detail for whoever studies a run
// afterwards (how long each setup step of an attempt took), not for the
// terminal.
func (e *eventLog) debugf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.file != nil {
		io.WriteString(e.file, e.now().Format(time.RFC3339Nano)+" debug: "+cluster.Escape(strings.TrimRight(fmt.Sprintf(format, args...), "\n"))+"\n")
	}
}

// writeCauses writes the causes in the order drover saw them: the first is
// the root cause, the rest (most often victims: a peer's connection
// closed) follow it as "then:".
func writeCauses(w io.Writer, procs []ProcSummary) {
	var causes []ProcSummary
	for _, p := range procs {
		if p.Cause != "" {
			causes = append(causes, p)
		}
	}
	sort.SliceStable(causes, func(i, j int) bool { return causes[i].CauseAt.Before(causes[j].CauseAt) })
	for i, p := range causes {
		label := "root cause"
		if i > 0 {
			label = "then"
		}
		fmt.Fprintf(w, "%s: %s on %s: %s\n", label, p.Name, p.Host, cluster.Escape(p.Cause))
	}
}

// startLeases gives the run its workdir leases (see package lease). The
// returned context ends, with a *lease.LostError as its cause, when
// another run takes a workdir over with --force; release gives every
// lease back and must run after the last process stopped.
func startLeases(ctx context.Context, job string, now time.Time, force bool, events *eventLog) (_ context.Context, _ *lease.Holder, release func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	leases := lease.New(lease.Self(job, now), lease.Options{
		Force: force,
		Logf:  events.printf,
		Lost:  func(err error) { events.printf("%v", err); cancel(err) },
	})
	return ctx, leases, func() {
		leases.Release()
		cancel(nil)
	}
}

// checkLeases reads every lease of the run before a restart (see
// lease.Holder.Check): the attempt that just failed may have failed
// because another run took the workdirs over with --force and stopped
// its processes as leftovers, and restarting would stop that run's
// processes in turn. A lease taken is a *lease.LostError, said as an
// event: the run then ends without restarting.
func checkLeases(ctx context.Context, leases *lease.Holder, events *eventLog) error {
	if lost := lostLease(ctx, nil); lost != nil {
		return lost // a renewal found it first, and said so
	}
	err := leases.Check(ctx)
	var le *lease.LostError
	if !errors.As(err, &le) {
		return nil
	}
	events.printf("%v", err)
	return err
}

// checkLeasesSoon starts checkLeases now and returns its wait: a failed
// attempt starts it as it begins to stop its group, so that the check the
// restart needs costs it no round trip of its own. A lease taken over
// after the check is still found: by the next attempt's lease, and by
// every host's agent before it stops a leftover.
func (r *runner) checkLeasesSoon(ctx context.Context) func() error {
	done := make(chan error, 1)
	go func() { done <- checkLeases(ctx, r.leases, r.events) }()
	return func() error { return <-done }
}

// lostLease is the *lease.LostError that ended the run, when one did:
// the cause of ctx (a renewal found the lease taken) or err (an attempt
// found it taken: a newer forced run's lease at Acquire, or a host's
// agent refusing to stop leftovers for a run that no longer holds it).
func lostLease(ctx context.Context, err error) error {
	var le *lease.LostError
	if cause := context.Cause(ctx); errors.As(cause, &le) {
		return cause
	}
	if errors.As(err, &le) {
		return err
	}
	return nil
}

// IsLost reports whether err is (or wraps) a workdir another run took
// over: the run failed (exit status 1) without restarting.
func IsLost(err error) bool {
	var le *lease.LostError
	return errors.As(err, &le)
}

// IsHeld reports whether err is (or wraps) a workdir held by another live
// run, which the CLI reports like a configuration error (exit status 2).
func IsHeld(err error) bool {
	var he *lease.HeldError
	return errors.As(err, &he)
}

// logFileWriter is a process's local log file as its stream sees it: a
// write that fails (the log disk is full, or gone) is reported once per
// run and then swallowed, so that the stream goes on to the terminal and
// the remote process never blocks on its stdout. The file gets nothing
// more after its first failed write, so it ends at a whole line (the hosts
// keep the whole log in <workdir>/.drover/logs/). A file that could not be
// created at all (f nil) takes nothing.
type logFileWriter struct {
	f      *os.File
	fail   *logFailure
	failed bool
}

// Write never fails.
func (w *logFileWriter) Write(p []byte) (int, error) {
	if w.failed || w.f == nil {
		return len(p), nil
	}
	if _, err := w.f.Write(p); err != nil {
		w.failed = true
		w.fail.report(path.Dir(path.Dir(w.f.Name())), err)
	}
	return len(p), nil
}

func (w *logFileWriter) Close() error {
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}

// createLog creates a process's local log file (see logFileWriter). Its
// sink serialises the writes, so the writer needs no lock of its own.
func (r *runner) createLog(file string) io.WriteCloser {
	f, err := os.Create(file)
	if err != nil {
		r.logFail.report(path.Dir(path.Dir(file)), err)
		f = nil
	}
	return &logFileWriter{f: f, fail: r.logFail}
}

// makeDir creates an attempt's log directory. A restart on a full log
// disk goes on without local logs rather than failing: the files it then
// cannot create say so, once, in createLog.
func (l *logFailure) makeDir(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		l.report(path.Dir(dir), err)
	}
}

// report says, once per run and loudly, that the local logs under
// runDir are incomplete and where the whole logs are. err names the file
// and the operation (an *fs.PathError).
// logFailure reports, once per run, that the local logs cannot be
// written.
type logFailure struct {
	once   sync.Once
	events *eventLog
}

func (l *logFailure) report(runDir string, err error) {
	l.once.Do(func() {
		l.events.printf("WARNING: cannot write the local logs (%v). The log files under %s are incomplete from here on; "+
			"output still streams to this terminal, and every host keeps the whole log in <workdir>/%s/attempt-<n>/. "+
			"The processes are not held up.", err, runDir, hostLogDir)
	})
}

// hostLogDir is where the agent keeps each process's log on its host,
// under the workdir.
const hostLogDir = ".drover/logs"
