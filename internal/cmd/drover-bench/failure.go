package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/launcher/agent"
)

// The workload of the failure benchmark: two of these per host, doing
// nothing for ten minutes, so that every process exit is one the harness
// caused.
var (
	workloadTop  = []string{"sh", "-c", "sleep 600"}
	workloadLeaf = []string{"sleep", "600"}
)

const (
	runWorkdir = "bench-run"
	// pollEvery is how often the harness looks at the hosts' processes;
	// figures are accurate to about this much.
	pollEvery = 5 * time.Millisecond
	// phaseTimeout bounds each wait (a stop, a restart): far above the
	// targets, so that a slow drover gives a figure and a hung one n/a.
	phaseTimeout = 30 * time.Second
)

var (
	startedEvent = regexp.MustCompile(`attempt (\d+)/\d+: started (\d+) process`)
	failedEvent  = regexp.MustCompile(`exited .*; stopping \d+ process`)
)

// eventLine is one line drover printed on stderr, stamped when it arrived.
type eventLine struct {
	At   time.Time
	Text string
}

// eventRecorder is drover run's stderr: it splits it into lines and stamps
// each on arrival (drover's own timestamps only have milliseconds and the
// wall clock; arrival time is on the harness's monotonic clock).
type eventRecorder struct {
	mu      sync.Mutex
	partial []byte
	lines   []eventLine
}

func (e *eventRecorder) Write(p []byte) (int, error) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.partial = append(e.partial, p...)
	for {
		i := bytes.IndexByte(e.partial, '\n')
		if i < 0 {
			break
		}
		e.lines = append(e.lines, eventLine{At: now, Text: string(e.partial[:i])})
		e.partial = e.partial[i+1:]
	}
	return len(p), nil
}

// find returns the first line at or after since that matches re.
func (e *eventRecorder) find(re *regexp.Regexp, since time.Time) (eventLine, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.lines {
		if !l.At.Before(since) && re.MatchString(l.Text) {
			return l, true
		}
	}
	return eventLine{}, false
}

// tail is the last few lines, to say why drover run went wrong.
func (e *eventRecorder) tail(n int) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, l := range e.lines[max(0, len(e.lines)-n):] {
		out = append(out, strings.TrimSpace(l.Text))
	}
	return strings.Join(out, " | ")
}

// failureResult is what the failure benchmark measured.
type failureResult struct {
	Stop, Restart, Detect []time.Duration
	// FirstRunning is from drover run's start to every process of the
	// first attempt running.
	FirstRunning time.Duration
	// FirstWaits and RestartWaits are runSetup.Waits' counts over the
	// same spans as FirstRunning and Restart.
	FirstWaits   int64
	RestartWaits []int64
	SteadyCPU    Measure // percent of one core while nothing happens
	RSS          Measure // peak, MiB
	CPU          Measure // user+sys of the whole run, seconds
	Wall         time.Duration
	Err          error // why the figures stop where they do
	Leftover     int   // workload processes still alive after drover exited
}

// failure runs a job of 2 processes per host under `drover run`, SIGKILLs
// one worker from outside `kills` times (one per attempt) and measures how
// fast drover stops the rest and has the next attempt running. It then
// interrupts drover and reads its peak memory and CPU time.
func (b *bench) failure(ctx context.Context, f *benchFleet) []Row {
	res := b.measureFailure(ctx, f, runSetup{Inventory: f.Inventory, Kills: b.kills, Steady: b.steady, Tag: "run"})
	if res.Err != nil {
		b.note("failure handling at N=%d: %s", f.N, reason(res.Err))
	}
	if res.Leftover > 0 {
		b.note("failure handling at N=%d: %d workload process(es) were still running after drover run exited", f.N, res.Leftover)
	}
	fig := func(ds []time.Duration) Measure {
		if len(ds) == 0 {
			if res.Err != nil {
				return na("%s", reason(res.Err))
			}
			return na("no runs")
		}
		return medianOf(ds)
	}
	procs := fmt.Sprintf("%d hosts x 2 procs", f.N)
	return []Row{
		{Section: "failure", N: f.N, What: "SIGKILL one worker -> drover reports it", Drover: fig(res.Detect)},
		{Section: "failure", N: f.N, What: "SIGKILL one worker -> every other process stopped", Drover: fig(res.Stop),
			Target: Target{Max: 1}},
		{Section: "failure", N: f.N, What: "SIGKILL one worker -> next attempt all running (backoff 0s)", Drover: fig(res.Restart),
			Target: Target{Max: 2}},
		{Section: "resources", N: f.N, What: "drover run peak RSS (" + procs + ")", Drover: res.RSS},
		{Section: "resources", N: f.N, What: "drover run CPU, steady supervision (" + procs + ")", Drover: res.SteadyCPU},
		{Section: "resources", N: f.N, What: fmt.Sprintf("drover run CPU user+sys, whole run (%s wall)", res.Wall.Round(time.Second)),
			Drover: res.CPU},
	}
}

// runSetup says how measureFailure runs drover: through which inventory
// (the fleet's own, or one through delay proxies), with how many outside
// kills, and whether to measure steady CPU (0: not).
type runSetup struct {
	Inventory string
	Kills     int
	Steady    time.Duration
	Tag       string // names the job file
	// Waits, when set, counts round trips waited for so far (the delay
	// proxies'): the result then has them for the first start and
	// each restart.
	Waits func() int64
}

func (b *bench) measureFailure(ctx context.Context, f *benchFleet, rs runSetup) (res failureResult) {
	res.RSS, res.SteadyCPU, res.CPU = na("not measured"), na("not measured"), na("not measured")
	code := filepath.Join(b.work, "run-code")
	if err := os.MkdirAll(code, 0o755); err != nil {
		res.Err = fmt.Errorf("make code dir: %w", err)
		return res
	}
	if err := os.WriteFile(filepath.Join(code, "README"), []byte("drover-bench failure workload\n"), 0o644); err != nil {
		res.Err = fmt.Errorf("make code dir: %w", err)
		return res
	}
	job := filepath.Join(b.work, fmt.Sprintf("%s-%d.toml", rs.Tag, f.N))
	if err := writeJob(job, rs.Inventory, code, runWorkdir, workloadTop, rs.Kills, 2); err != nil {
		res.Err = err
		return res
	}
	scanner, err := newProcScanner(f, workloadTop, workloadLeaf)
	if err != nil {
		res.Err = err
		return res
	}
	events := &eventRecorder{}
	cmd := exec.Command(b.drover, "run", "--quiet", "--log-dir", filepath.Join(b.work, "runs"), job)
	cmd.Stderr = events
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 3 * time.Second
	waits := rs.Waits
	if waits == nil {
		waits = func() int64 { return 0 }
	}
	w0 := waits()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		res.Err = fmt.Errorf("start drover run: %w", err)
		return res
	}
	hwm := watchHWM(cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var waitErr error
	done := false
	defer func() {
		// Always stop drover: SIGINT first (it stops every process on
		// the hosts), SIGKILL to the group if it does not exit.
		if !done {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case waitErr = <-exited:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				waitErr = <-exited
				if res.Err == nil {
					res.Err = errors.New("drover run did not stop within 30s of SIGINT")
				}
			}
		}
		res.Wall = time.Since(start)
		if ps := cmd.ProcessState; ps != nil {
			res.CPU = Measure{Value: (ps.UserTime() + ps.SystemTime()).Seconds(), Unit: Seconds, N: 1}
		}
		if kb := hwm(); kb > 0 {
			res.RSS = Measure{Value: float64(kb) / 1024, Unit: MiB, N: 1}
		}
		if waitErr != nil && !isInterruptExit(waitErr) && res.Err == nil {
			res.Err = fmt.Errorf("drover run: %w: %s", waitErr, events.tail(2))
		}
		res.Leftover = waitGone(scanner, 10*time.Second)
	}()
	fail := func(format string, args ...any) failureResult {
		res.Err = fmt.Errorf(format, args...)
		return res
	}
	// wait polls cond until it holds, drover exits, ctx ends or timeout.
	wait := func(what string, timeout time.Duration, cond func() (bool, error)) error {
		deadline := time.Now().Add(timeout)
		for {
			ok, err := cond()
			if err != nil || ok {
				return err
			}
			select {
			case waitErr = <-exited:
				done = true
				return fmt.Errorf("drover run exited while waiting for %s: %v: %s", what, waitErr, events.tail(2))
			case <-ctx.Done():
				return fmt.Errorf("out of time waiting for %s", what)
			case <-time.After(pollEvery):
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not within %s", what, timeout)
			}
		}
	}

	want := 2 * f.N
	seen := map[procKey]bool{}
	newLeaves := func(ps []workerProc) int {
		n := 0
		for _, p := range ps {
			if p.Leaf && p.Alive && !seen[p.Key] {
				n++
			}
		}
		return n
	}
	var procs []workerProc
	allRunning := func() (bool, error) {
		var err error
		procs, err = scanner.scan()
		return err == nil && newLeaves(procs) == want, err
	}
	b.progress("failure handling (%s), %d hosts: drover run, %d processes, %d outside SIGKILLs", rs.Tag, f.N, want, rs.Kills)
	if err := wait("attempt 1 to start", 3*time.Minute, func() (bool, error) {
		_, ok := events.find(startedEvent, start)
		return ok, nil
	}); err != nil {
		return fail("%w", err)
	}
	if err := wait(fmt.Sprintf("%d workload processes", want), phaseTimeout, allRunning); err != nil {
		return fail("%w", err)
	}
	res.FirstRunning = time.Since(start)
	res.FirstWaits = waits() - w0
	if rs.Steady > 0 {
		res.SteadyCPU = b.steadyCPU(ctx, cmd.Process.Pid, rs.Steady)
	}

	for k := 0; k < rs.Kills; k++ {
		for _, p := range procs {
			seen[p.Key] = true
		}
		var victim *workerProc
		host := (1 + k) % f.N
		for i, p := range procs {
			if p.Top && p.Alive && p.Host == host {
				victim = &procs[i]
				break
			}
		}
		if victim == nil {
			return fail("kill %d: no worker found on %s", k+1, f.Hosts[host].Name)
		}
		others := map[procKey]bool{}
		for _, p := range procs {
			if p.Alive && p.Key != victim.Key {
				others[p.Key] = true
			}
		}
		t0, wk := time.Now(), waits()
		if err := syscall.Kill(victim.Key.Pid, syscall.SIGKILL); err != nil {
			return fail("kill %d: SIGKILL %d: %w", k+1, victim.Key.Pid, err)
		}
		var stopAt, runAt time.Time
		err := wait("every other process to stop and the next attempt to run", phaseTimeout, func() (bool, error) {
			ps, err := scanner.scan()
			if err != nil {
				return false, err
			}
			now := time.Now()
			procs = ps
			if stopAt.IsZero() {
				alive := 0
				for _, p := range ps {
					if p.Alive && others[p.Key] {
						alive++
					}
				}
				if alive == 0 {
					stopAt = now
				}
			}
			if !stopAt.IsZero() && newLeaves(ps) == want {
				runAt = now
				return true, nil
			}
			return false, nil
		})
		if !stopAt.IsZero() {
			res.Stop = append(res.Stop, stopAt.Sub(t0))
		}
		if ev, ok := events.find(failedEvent, t0); ok {
			res.Detect = append(res.Detect, ev.At.Sub(t0))
		}
		if err != nil {
			return fail("kill %d: %w", k+1, err)
		}
		res.Restart = append(res.Restart, runAt.Sub(t0))
		res.RestartWaits = append(res.RestartWaits, waits()-wk)
		b.progress("  kill %d/%d (%s): stopped after %s, next attempt running after %s", k+1, rs.Kills,
			f.Hosts[host].Name, stopAt.Sub(t0).Round(time.Millisecond), res.Restart[k].Round(time.Millisecond))
	}
	return res
}

// steadyCPU is drover run's CPU use while it only supervises: heartbeats
// and nothing else.
func (b *bench) steadyCPU(ctx context.Context, pid int, window time.Duration) Measure {
	t0, err := cpuTicks("/proc", pid)
	if err != nil {
		return na("%s", reason(err))
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return na("out of time")
	case <-time.After(window):
	}
	t1, err := cpuTicks("/proc", pid)
	if err != nil {
		return na("%s", reason(err))
	}
	el := time.Since(start)
	return Measure{Value: float64(t1-t0) / clockTicks / el.Seconds() * 100, Unit: Percent, N: 1}
}

// isInterruptExit is drover's exit after the SIGINT the harness sent.
func isInterruptExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == agent.ExitInterrupted
}

// waitGone waits for every workload process to be gone and returns how many
// are still alive after timeout.
func waitGone(s *procScanner, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		ps, err := s.scan()
		alive := 0
		for _, p := range ps {
			if p.Alive {
				alive++
			}
		}
		if err != nil || alive == 0 || time.Now().After(deadline) {
			return alive
		}
		time.Sleep(50 * time.Millisecond)
	}
}
