package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/droverhq/drover/internal/fleettest/lighthost"
)

// Scale goals from issue 20, for exec at N=256.
const (
	scaleRSSGoal = 100 // MiB
	scaleCPUGoal = 10  // ms of drover CPU per host
)

// scaleTimeout bounds one drover command at scale.
const scaleTimeout = 3 * time.Minute

// scaleRun is what one drover command cost at scale.
type scaleRun struct {
	Wall, CPU time.Duration
	RSS       int64 // KiB
	Fleet     time.Duration
}

// selfCPU is this process's CPU plus its waited-for children's: the light
// hosts run in this process and their commands are its children.
func selfCPU() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// scale runs exec, push and run against b.scaleN light hosts (one SSH
// server in this process, internal/fleettest/lighthost) and reports
// drover's wall time, CPU per host and peak memory.
func (b *bench) scale(ctx context.Context) []Row {
	n := b.scaleN
	row := func(what string, m Measure, t Target) Row {
		return Row{Section: "scale", N: n, What: what, Drover: m, Target: t}
	}
	dir := filepath.Join(b.work, "light")
	_ = os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	b.progress("scale: starting %d light hosts (one SSH server in this process)", n)
	f, err := lighthost.NewFleet(dir, "lh", n, benchShell)
	if err != nil {
		return []Row{row("every operation", na("%s", reason(err)), Target{})}
	}
	defer f.Close()
	tree := filepath.Join(b.work, "small-tree")
	job := filepath.Join(b.work, "scale.toml")
	_, err1 := generateTree(tree, smallTree)
	err2 := writeJob(job, f.Inventory, tree, "bench-scale", workloadTop, 0, 1)
	if err := errors.Join(err1, err2); err != nil {
		return []Row{row("every operation", na("%s", reason(err)), Target{})}
	}
	// drover runs as a child of this process, so the fleet's CPU is this
	// process's and its children's, less drover's own.
	measure := func(what string, reps int, args ...string) ([]scaleRun, error) {
		var runs []scaleRun
		for i := 0; i < reps && ctx.Err() == nil; i++ {
			c0 := selfCPU()
			st, err := command{Args: append([]string{b.drover}, args...), Timeout: scaleTimeout}.run(ctx)
			if err != nil {
				return runs, fmt.Errorf("%s: %w", what, err)
			}
			runs = append(runs, scaleRun{Wall: st.Wall, CPU: st.CPU, RSS: st.MaxRSS, Fleet: selfCPU() - c0 - st.CPU})
			b.progress("  %s: %s wall, %.1f ms drover CPU per host, %.1f MiB", what, st.Wall.Round(time.Millisecond),
				st.CPU.Seconds()*1000/float64(n), float64(st.MaxRSS)/1024)
		}
		return runs, nil
	}
	var rows []Row
	add := func(what string, runs []scaleRun, err error, cpuGoal, rssGoal bool) {
		if err != nil {
			b.note("scale, %d hosts: %s", n, reason(err))
		}
		if len(runs) == 0 {
			rows = append(rows, row(what, na("%s", reasonOr(err, "out of time")), Target{}))
			return
		}
		var walls, cpus, fleet []time.Duration
		var rss int64
		for _, r := range runs {
			walls, cpus, fleet = append(walls, r.Wall), append(cpus, r.CPU), append(fleet, r.Fleet)
			rss = max(rss, r.RSS)
		}
		per := func(ds []time.Duration) Measure {
			m := medianOf(ds)
			return Measure{Value: m.Value * 1000 / float64(n), Unit: Millis, N: m.N}
		}
		ct, rt := Target{}, Target{}
		if cpuGoal {
			ct = Target{Max: scaleCPUGoal, Unit: Millis}
		}
		if rssGoal {
			rt = Target{Max: scaleRSSGoal, Unit: MiB}
		}
		rows = append(rows,
			row(what+": wall time", medianOf(walls), Target{}),
			row(what+": drover CPU per host", per(cpus), ct),
			row(what+": drover peak RSS", Measure{Value: float64(rss) / 1024, Unit: MiB, N: len(runs)}, rt),
			row(what+": light hosts' CPU per host", per(fleet), Target{}))
	}
	b.progress("scale, %d hosts: drover exec -- true, %d runs", n, b.reps)
	runs, err := measure("exec", b.reps, "exec", f.Inventory, "--", "true")
	add("exec `true`", runs, err, true, true)
	b.progress("scale, %d hosts: drover push (%d files), first and with nothing changed", n, smallTree.Files())
	runs, err = measure("first push", 1, "push", job)
	add(fmt.Sprintf("first push (%d files)", smallTree.Files()), runs, err, false, false)
	runs, err = measure("push, nothing changed", b.reps, "push", job)
	add("push, nothing changed", runs, err, false, false)
	b.progress("scale, %d hosts: drover run, start to every process started, then interrupted", n)
	var r scaleRun
	if err = seedAgent(f, b.drover); err == nil {
		r, err = b.scaleRun(ctx, job)
	}
	var rr []scaleRun
	if err == nil {
		rr = []scaleRun{r}
	}
	add("drover run: start -> every process started", rr, err, false, true)
	return rows
}

// scaleRun starts `drover run`, waits for its "started" event and
// interrupts it; the CPU and memory are the whole run's, its stop
// included.
func (b *bench) scaleRun(ctx context.Context, job string) (scaleRun, error) {
	events := &eventRecorder{}
	cmd := exec.Command(b.drover, "run", "--quiet", "--log-dir", filepath.Join(b.work, "runs"), job)
	cmd.Stderr = events
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c0 := selfCPU()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return scaleRun{}, fmt.Errorf("start drover run: %w", err)
	}
	hwm := watchHWM(cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var r scaleRun
	var runErr error
	deadline := time.After(scaleTimeout)
wait:
	for {
		if _, ok := events.find(startedEvent, start); ok {
			r.Wall = time.Since(start)
			break
		}
		select {
		case err := <-exited:
			return r, fmt.Errorf("drover run exited before starting: %v: %s", err, events.tail(2))
		case <-ctx.Done():
			runErr = errors.New("out of time")
			break wait
		case <-deadline:
			runErr = fmt.Errorf("not started within %s: %s", scaleTimeout, events.tail(2))
			break wait
		case <-time.After(pollEvery):
		}
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		runErr = errors.Join(runErr, errors.New("drover run did not stop within a minute of SIGINT"))
	}
	if ps := cmd.ProcessState; ps != nil {
		r.CPU = ps.UserTime() + ps.SystemTime()
	}
	r.RSS = hwm()
	r.Fleet = selfCPU() - c0 - r.CPU
	return r, runErr
}

// seededAgent is the binary drover installs on a host like this machine:
// the carried static agent beside it when there is one (make build strips
// those, so they differ from drover itself), else drover.
func seededAgent(drover string) string {
	carried := filepath.Join(filepath.Dir(drover), "drover-agent-linux-"+runtime.GOARCH)
	if _, err := os.Stat(carried); err == nil {
		return carried
	}
	return drover
}

// seedAgent puts the drover binary where InstallAgent looks for it on every
// light host (hard links of one copy), so that the run at scale measures
// fanning out, not 256 uploads of the same 15 MB (the latency section
// measures an install).
func seedAgent(f *lighthost.Fleet, drover string) error {
	data, err := os.ReadFile(seededAgent(drover))
	if err != nil {
		return fmt.Errorf("seed agents: %w", err)
	}
	sum := sha256.Sum256(data)
	copyPath := filepath.Join(f.Dir, "agent")
	if err := os.WriteFile(copyPath, data, 0o755); err != nil {
		return fmt.Errorf("seed agents: %w", err)
	}
	name := "drover-" + hex.EncodeToString(sum[:])[:12]
	for _, h := range f.Hosts() {
		dir := filepath.Join(h.Home, ".drover", "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("seed agent on %s: %w", h.Name, err)
		}
		if err := os.Link(copyPath, filepath.Join(dir, name)); err != nil && !os.IsExist(err) {
			return fmt.Errorf("seed agent on %s: %w", h.Name, err)
		}
	}
	return nil
}
