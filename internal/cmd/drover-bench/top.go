package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// topBudget bounds the top section: the --once repetitions and the
// interactive view's window.
const topBudget = 150 * time.Second

// top measures `drover top` on the fleet: the wall time of `top --once
// --json` (every host dialled, its agent asked, one sample each; target
// under 2 s at 16 hosts), and the CPU the interactive view uses while it
// refreshes every second, in a terminal that script(1) provides, over
// b.topWindow (target under 5% of one core).
func (b *bench) top(ctx context.Context, f *benchFleet) []Row {
	job := filepath.Join(b.work, fmt.Sprintf("top-%d.toml", f.N))
	if err := writeJob(job, f.Inventory, b.tree, "bench-top", []string{"true"}, 0, 1); err != nil {
		return []Row{{Section: "top", N: f.N, What: "top --once --json", Drover: na("%v", err)}}
	}
	b.progress("top, %d hosts: `drover top --once --json`, %d runs after a warm-up", f.N, b.reps)
	once := command{Args: []string{b.drover, "top", "--once", "--json", job}, Timeout: time.Minute}
	var walls []time.Duration
	var onceM Measure
	for i := 0; i <= b.reps; i++ {
		st, err := once.run(ctx)
		if err != nil {
			onceM = na("%s", reason(err))
			break
		}
		if i > 0 { // the first installs the agents
			walls = append(walls, st.Wall)
		}
	}
	if onceM.NA == "" {
		onceM = medianOr(walls)
	}
	rows := []Row{{Section: "top", N: f.N, What: "`top --once --json`", Drover: onceM, Target: Target{Max: 2}}}
	return append(rows, Row{Section: "top", N: f.N, What: fmt.Sprintf("interactive `top`, CPU over %s", b.topWindow),
		Drover: b.topCPU(ctx, job), Target: Target{Max: 5, Unit: Percent}})
}

// topCPU runs the interactive view in a pseudo-terminal and measures the
// CPU of its process tree over b.topWindow, after a few seconds to
// connect.
func (b *bench) topCPU(ctx context.Context, job string) Measure {
	script, err := exec.LookPath("script")
	if err != nil {
		return na("no script(1) for a terminal")
	}
	b.progress("top: the interactive view's CPU over %s", b.topWindow)
	cmd := exec.CommandContext(ctx, script, "-qfec", fmt.Sprintf("%q top %q", b.drover, job), "/dev/null")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return na("%s", reason(err))
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	select {
	case <-ctx.Done():
		return na("out of time")
	case <-time.After(5 * time.Second):
	}
	pids := append([]int{cmd.Process.Pid}, children(cmd.Process.Pid)...)
	t0, err := sumTicks(pids)
	if err != nil {
		return na("%s", reason(err))
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return na("out of time")
	case <-time.After(b.topWindow):
	}
	t1, err := sumTicks(pids)
	if err != nil {
		return na("%s", reason(err))
	}
	return Measure{Value: float64(t1-t0) / clockTicks / time.Since(start).Seconds() * 100, Unit: Percent, N: 1}
}

// children are pid's child processes (script's drover).
func children(pid int) []int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// sumTicks is the CPU time of pids, in clock ticks.
func sumTicks(pids []int) (uint64, error) {
	var sum uint64
	for _, p := range pids {
		t, err := cpuTicks("/proc", p)
		if err != nil {
			return 0, err
		}
		sum += t
	}
	return sum, nil
}

// topSection says whether the top section runs on a fleet of n hosts.
func (b *bench) topSection(n int) bool {
	return b.sections["top"] && slices.Contains([]int{b.topN}, n)
}
