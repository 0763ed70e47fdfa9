package launcher

// The ground floor of a run (see "Reading the package" in
// docs/architecture.md): what it is given (RunOptions) and what it
// reports (Result, the summary, events.log, the local log files). Every
// other file of the run core may use it; it uses none of them.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/notify"
	"github.com/droverhq/drover/launcher/plan"
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
	// Fresh starts over (drover run --fresh): no process gets a
	// DROVER_RESUME_FROM from what existed before the run, and drover's
	// copies of older checkpoints are set aside, not deleted (see
	// checkpoint.StartOver).
	Fresh bool
	// Queue waits for GPUs that other runs lease, in each host's queue
	// (drover run --queue), at most QueueTimeout (0: no bound).
	Queue        bool
	QueueTimeout time.Duration
	// Adjust, when set, changes the configuration after each reading of
	// the job file (the first and every restart's): drover sweep uses it
	// to make one trial of the job (its host, GPUs, workdir, command and
	// env).
	Adjust func(*config.Config) error

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
	// Queued, for a detached --queue run, is called in Ready's place
	// when the run waits in a host's GPU queue before it ran: `drover
	// run -d --queue` returns then, and the run waits in the background.
	Queued func(runID, logDir string)

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
	Name string
	Host string
	// Rank is its torch.distributed rank, -1 where none applies.
	Rank     int
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
		s = &ProcSummary{Name: key, Host: p.Host.Name, Rank: p.Rank, Exit: "not started"}
		t.procs[key] = s
		t.order = append(t.order, key)
	}
	return s
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
		var stop *hostio.StopRequest
		if errors.As(res.Err, &stop) {
			// Another terminal stopped it: say who, so that the one
			// watching this one learns why it ended.
			fmt.Fprintf(w, "%s in attempt %d; logs in %s\n", cluster.Escape(stop.Error()), res.Attempts, res.LogDir)
			return
		}
		fmt.Fprintf(w, "interrupted in attempt %d; logs in %s\n", res.Attempts, res.LogDir)
	default:
		fmt.Fprintf(w, "failed after %d attempt(s): %s; logs in %s\n", res.Attempts, errorLines(res.Err), res.LogDir)
	}
}

// firstCause is the first cause drover saw among procs since since
// (zero: any): the summary's "root cause" line.
func firstCause(procs []ProcSummary, since time.Time) (ProcSummary, bool) {
	var root ProcSummary
	for _, p := range procs {
		if p.Cause != "" && !p.CauseAt.Before(since) && (root.Cause == "" || p.CauseAt.Before(root.CauseAt)) {
			root = p
		}
	}
	return root, root.Cause != ""
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

// eventLog prints drover's own events, timestamped, to the terminal and to
// events.log in the run's log directory.
type eventLog struct {
	mu   sync.Mutex
	w    io.Writer
	file *os.File
	now  func() time.Time
	// said are the keys printOnce printed.
	said map[string]bool
	// sink, when set, takes the run's notifications (see notify); the
	// runner fills in the job and run id. startTold: the run told it
	// started.
	sink      func(notify.Event)
	startTold bool
}

// startNotify starts the run's notifications (the job's on_event and
// webhook; see package notify) as read when the run starts, and returns
// what delivers the last ones before the run returns, within
// notifyDrain. runID is the run's id when an event is sent (an adoption
// changes it).
func (e *eventLog) startNotify(cfg *config.Config, runID func() string) (closeNotify func()) {
	j := cfg.Job
	n := notify.New(notify.Options{OnEvent: j.OnEvent, Dir: filepath.Dir(cfg.Path), Webhook: j.Webhook,
		Format: j.WebhookFormat, Notify: j.Notify, Logf: e.printf})
	if n == nil {
		return func() {}
	}
	e.mu.Lock()
	e.sink = func(ev notify.Event) {
		ev.Job, ev.RunID = j.Name, runID()
		n.Send(ev)
	}
	e.mu.Unlock()
	return func() { n.Close(notifyDrain) }
}

// notifyDrain bounds how long a run's end waits for its last
// notifications: a command or POST each takes notify.DefaultTimeout at
// most.
const notifyDrain = notify.DefaultTimeout + 5*time.Second

// notify hands ev to the run's notifications, stamped now; it never
// blocks (notify.Notifier.Send). A Started event is sent once per run:
// a restart is told as Restarted.
func (e *eventLog) notify(ev notify.Event) {
	e.mu.Lock()
	sink := e.sink
	if ev.Kind == notify.Started && sink != nil {
		if e.startTold {
			sink = nil
		}
		e.startTold = true
	}
	e.mu.Unlock()
	if sink == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = e.now()
	}
	ev.Message = eventMessage("%s", ev.Message)
	sink(ev)
}

// printOnce is printf the first time the run prints key, and nothing
// after: a warning about the code directory (a file changing while
// pushed) is worth one line per run, not one per attempt or host.
func (e *eventLog) printOnce(key, format string, args ...any) {
	e.mu.Lock()
	said := e.said[key]
	if e.said == nil {
		e.said = map[string]bool{}
	}
	e.said[key] = true
	e.mu.Unlock()
	if !said {
		e.printf(format, args...)
	}
}

// An event is one line, and the lines of an error it names (one per host
// of a phase that failed on several) follow it indented: control characters
// in its arguments (a newline, an escape sequence in a checkpoint name or
// in a host's output) are escaped (eventMessage), so a host can neither
// forge a line nor drive the terminal.
func (e *eventLog) printf(format string, args ...any) {
	msg := eventMessage(format, args...)
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
		io.WriteString(e.file, e.now().Format(time.RFC3339Nano)+" debug: "+eventMessage(format, args...)+"\n")
	}
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

// logFailure reports, once per run, that the local logs cannot be
// written.
type logFailure struct {
	once   sync.Once
	events *eventLog
}

// report says, once per run and loudly, that the local logs under
// runDir are incomplete and where the whole logs are. err names the file
// and the operation (an *fs.PathError).
func (l *logFailure) report(runDir string, err error) {
	l.once.Do(func() {
		l.events.printf("WARNING: cannot write the local logs (%v). The log files under %s are incomplete from here on; "+
			"output still streams to this terminal, and every host keeps the whole log in <workdir>/%s/attempt-<n>/. "+
			"The processes are not held up.", err, runDir, hostLogDir)
	})
}

// makeDir creates an attempt's log directory. A restart on a full log
// disk goes on without local logs rather than failing: the files it then
// cannot create say so, once, in createLog.
func (l *logFailure) makeDir(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		l.report(path.Dir(dir), err)
	}
}

// hostLogDir is where the agent keeps each process's log on its host,
// under the workdir.
const hostLogDir = ".drover/logs"

// eventMessage formats an event from drover's own format and arguments
// that may carry a host's text. Each argument is escaped on its own
// (cluster.Escape), so the message holds no control character of a host;
// an error keeps its lines (errorLines: errors.Join's, one per host), each
// escaped and indented under the event, so that a phase that failed on
// three hosts reads as three lines, not one with literal "\n"s. Numbers
// and booleans are passed as they are, for their verbs.
func eventMessage(format string, args ...any) string {
	esc := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case nil:
			esc[i] = v
		case error:
			esc[i] = errorLines(v)
		case string:
			esc[i] = cluster.Escape(v)
		default:
			switch reflect.ValueOf(v).Kind() {
			case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
				reflect.Float32, reflect.Float64:
				esc[i] = v
			default:
				esc[i] = cluster.Escape(fmt.Sprint(v))
			}
		}
	}
	return fmt.Sprintf(cluster.Escape(strings.TrimRight(format, "\n")), esc...)
}

// errorLines renders err for an event or the summary: each of its lines
// escaped, the lines after the first indented by two spaces, so that none
// can pass for an event, a process's line or a line of the table.
func errorLines(err error) string {
	if err == nil {
		return fmt.Sprint(err)
	}
	lines := strings.Split(strings.TrimRight(err.Error(), "\n"), "\n")
	for i, l := range lines {
		lines[i] = cluster.Escape(l)
	}
	return strings.Join(lines, "\n  ")
}
