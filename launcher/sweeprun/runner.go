package sweeprun

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"

	"github.com/droverhq/drover/launcher/sweep"
)

// Sweep is one sweep to run.
type Sweep struct {
	ID      string
	Options *sweep.Options
	// Command is the job's command, with its {NAME} references.
	Command []string
	// Fleet is every GPU a trial may take, by host: the hosts' selectable
	// GPUs, leased or not, when the sweep starts.
	Fleet []sweep.HostGPUs
	// Free is those of Fleet that no run leased at the start (nil: all).
	Free []sweep.HostGPUs
	// Refresh looks at the hosts again (their GPUs free of any run's
	// lease, as drover probe shows them), while a trial waits for GPUs
	// that other runs lease; nil: the sweep knows only what it was
	// given and the conflicts its trials ran into.
	Refresh func(ctx context.Context) ([]sweep.HostGPUs, error)
	// RefreshEvery is how often Refresh runs while trials wait on other
	// runs' leases (0: DefaultRefreshEvery).
	RefreshEvery time.Duration
	// Policy moves a trial whose host was lost (the job's restart policy).
	Policy sweep.Policy
	// Placer decides where a trial runs (nil: sweep.Pack).
	Placer   sweep.Placer
	RunTrial RunTrial
	// Table is where the live table goes (nil: nowhere); Live redraws it
	// in place (a terminal), else each change is one line.
	Table io.Writer
	Live  bool
	// Now is the wall clock (nil: time.Now).
	Now func() time.Time
	// Resumed, one per trial, resumes a sweep from its record (see
	// state.go); nil starts it afresh. Persist, when set, is handed every
	// trial's record every few seconds and at the end.
	Resumed []Resumed
	Persist func([]sweep.TrialRecord)
}

// trial is one trial's state; Sweep.mu guards it.
type trial struct {
	res     sweep.Result
	series  sweep.Series
	cancel  context.CancelFunc
	stopped bool
	err     error
	resumed sweep.Resume // on resume: kept or adopted, not placed
	// replay drops the repeats of the series its record kept from an
	// adopted trial's output (nil: none to drop).
	replay *sweep.Replay
	lost   int // the hosts it lost
}

// state is a running sweep.
type state struct {
	*Sweep
	mu     sync.Mutex
	trials []*trial
	table  *table
}

// Outcome is how a sweep went: the ranked report and why each failed
// trial failed, by trial id.
type Outcome struct {
	Report sweep.Report
	Errors map[string]error
}

// Run runs every trial, at most Options.MaxParallel at a time and never
// two on one GPU, and returns them ranked by the objective. A trial is
// recorded as completed (or early-stopped) before its GPUs go to the
// next, so that the median rule counts it when the next one reports.
// Cancelling ctx (Ctrl-C, drover sweep stop) stops the running trials
// and starts no more: those it stopped are sweep.Interrupted in the
// report, not failed, and those left pending.
func (s *Sweep) Run(ctx context.Context) (Outcome, error) {
	st := &state{Sweep: s}
	for _, t := range s.Options.Trials {
		st.trials = append(st.trials, &trial{res: sweep.Result{ID: t.ID, Params: t.Params, State: sweep.Pending}})
	}
	st.restore()
	st.table = newTable(s.Table, s.Live, s.Options.Params)
	stopDraw := st.table.start(st.snapshot)
	stopPersist := st.persist()
	err := st.schedule(ctx)
	stopPersist()
	stopDraw()
	return Outcome{Report: sweep.Rank(st.snapshot(), s.Options.Goal), Errors: st.errs()}, err
}

// runTrial runs trial i on p and records how it ended before saying so
// on done. A run that gave its placement back (a setback the policy
// requeues) leaves the trial pending, to be placed again.
func (st *state) runTrial(ctx context.Context, i int, p sweep.Placement, done chan<- ended) {
	t := st.trials[i]
	tc, cancel := context.WithCancel(ctx)
	defer cancel()
	now := st.now()
	st.mu.Lock()
	if t.resumed == sweep.Adopt {
		now = *cmp.Or(t.res.Started, &now) // an adopted trial started before
	}
	t.res.State, t.res.Started, t.cancel = sweep.Running, &now, cancel
	t.res.Place(p)
	st.mu.Unlock()
	st.table.changed(st.snapshot, i)

	spec := TrialSpec{Trial: st.Options.Trials[i], SweepID: st.ID, Placement: p,
		Command: st.Options.Trials[i].Command(st.Command), Env: st.Options.Trials[i].Env(st.ID)}
	lw := &lineWriter{line: func(l string) { st.line(i, l) }}
	spec.Out = lw
	err := st.RunTrial(tc, spec)
	lw.flush()

	end := st.now()
	st.mu.Lock()
	d, lost := st.setback(ctx, t, err)
	switch {
	case d != nil && d.Requeue:
	case t.stopped:
		t.res.State, t.res.Ended = sweep.Stopped, &end
	case err == nil:
		t.res.State, t.res.Ended = sweep.Completed, &end
	case ctx.Err() != nil:
		// The sweep's end stopped it (its run failed because it was
		// stopped): not the trial's failure.
		t.res.State, t.res.Ended = sweep.Interrupted, &end
		err = nil
	default:
		if d != nil {
			err = fmt.Errorf("%w; %s", err, d.Why)
		}
		t.res.State, t.res.Ended, t.err = sweep.Failed, &end, err
	}
	st.mu.Unlock()
	if d != nil && d.Requeue {
		st.table.note(requeueNote(t.res.ID, p, err, d, lost))
	} else {
		st.table.changed(st.snapshot, i)
		if err != nil && !t.stopped {
			st.table.failed(t.res.ID, err)
		}
	}
	done <- ended{i: i, p: p, d: d, lost: lost}
}

// requeueNote says that trial id gives p back after err, in the
// sweep's terms: it waits for GPUs another run leased, or its host was
// lost and it moves to another, with the moves it has left.
func requeueNote(id string, p sweep.Placement, err error, d *sweep.Decision, lost string) string {
	if !d.MarkOut {
		return fmt.Sprintf("%s gives %s back and waits to be placed again: %v", id, p, err)
	}
	out := "the hosts of its group that no longer answer are"
	if lost != "" {
		out = lost + " is"
	} else if len(p.Hosts) == 1 {
		out = p.Host() + " is"
	}
	return fmt.Sprintf("%s gives %s back: %v; %s left out of the sweep, and %s", id, p, err, out, d.Why)
}

// line reads the metrics of one line of trial i's output and applies the
// early stopping rule.
func (st *state) line(i int, l string) {
	reps := st.Options.Collector.Line(stripPrefix(l))
	if len(reps) == 0 {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.trials[i]
	n := len(t.series)
	t.series.Add(st.Options.Metric, t.replay.Filter(reps))
	if len(t.series) == n {
		return
	}
	best, _ := st.Options.Goal.Best(t.series)
	t.res.Metric, t.res.Steps = &best, t.series.Steps()
	if st.Options.EarlyStop == nil || t.stopped || t.res.State != sweep.Running {
		return
	}
	var completed []sweep.Series
	for _, o := range st.trials {
		if o.res.State == sweep.Completed {
			completed = append(completed, o.series)
		}
	}
	if st.Options.EarlyStop.ShouldStop(t.series, completed) {
		t.stopped = true
		t.cancel()
	}
}

// snapshot copies every trial's result.
func (st *state) snapshot() []sweep.Result {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]sweep.Result, len(st.trials))
	for i, t := range st.trials {
		out[i] = t.res
	}
	return out
}

// Errors are the failed trials' errors, by trial id.
func (st *state) errs() map[string]error {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := map[string]error{}
	for _, t := range st.trials {
		if t.err != nil {
			m[t.res.ID] = t.err
		}
	}
	return m
}

func (st *state) now() time.Time {
	if st.Now != nil {
		return st.Now()
	}
	return time.Now()
}

// prefixRE is drover run's "[worker-0@h1] " before each process's line.
var prefixRE = regexp.MustCompile(`^\[[^\]\s]*@[^\]\s]*\] `)

func stripPrefix(l string) string { return prefixRE.ReplaceAllString(l, "") }

// lineWriter calls line for each complete line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		l := string(bytes.TrimRight(w.buf[:i], "\r"))
		w.buf = w.buf[i+1:]
		w.line(l)
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.line(string(w.buf))
		w.buf = nil
	}
}
