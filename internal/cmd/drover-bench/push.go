package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Remote directories (relative to the login home) the two tools push to,
// kept apart so that neither finds the other's files.
const (
	droverPushDir = "bench-push"
	rsyncPushDir  = "bench-rsync"
)

// pushTimeout bounds one push to every host (70 MB x 32 over loopback SSH
// on two cores takes well under a minute).
const pushTimeout = 4 * time.Minute

// writeJob writes a drover job file for the fleet, with procs processes
// per host.
func writeJob(path, inventory, code, workdir string, command []string, maxRestarts, procs int) error {
	cmd := ""
	for i, a := range command {
		if i > 0 {
			cmd += ", "
		}
		cmd += fmt.Sprintf("%q", a)
	}
	text := fmt.Sprintf(`# written by drover-bench
inventory = %q

[job]
name = "bench"
framework = "pytorch"
command = [%s]
code = %q
workdir = %q
procs_per_host = %d
max_restarts = %d
restart_backoff = "0s"
stop_grace = "2s"
`, inventory, cmd, code, workdir, procs, maxRestarts)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write job file: %w", err)
	}
	return nil
}

// push times pushing the generated tree to every host: drover push against
// one rsync per host, all started at once. Three cases: into empty
// workdirs, with nothing changed, and with one file changed.
func (b *bench) push(ctx context.Context, f *benchFleet) []Row {
	rows := func(first, same, one []Measure) []Row {
		return []Row{
			{Section: "push", N: f.N, What: "first push (70 MB, 3,000 files)", Drover: first[0],
				Baseline: "rsync x N", BaselineTime: first[1], Target: Target{MinSpeedup: 1}},
			{Section: "push", N: f.N, What: "push, nothing changed", Drover: same[0],
				Baseline: "rsync x N", BaselineTime: same[1], Target: Target{MinSpeedup: 5}},
			{Section: "push", N: f.N, What: "push, one file changed", Drover: one[0],
				Baseline: "rsync x N", BaselineTime: one[1], Target: Target{MinSpeedup: 5}},
		}
	}
	job := filepath.Join(b.work, fmt.Sprintf("push-%d.toml", f.N))
	if err := writeJob(job, f.Inventory, b.tree, droverPushDir, []string{"true"}, 0, 2); err != nil {
		m := na("%s", reason(err))
		return rows([]Measure{m, m}, []Measure{m, m}, []Measure{m, m})
	}
	droverPush := contender{Name: "drover", Run: func(ctx context.Context) (procStats, error) {
		return command{Args: []string{b.drover, "push", job}, Timeout: pushTimeout}.run(ctx)
	}}
	rsync := contender{Name: "rsync", Run: func(ctx context.Context) (procStats, error) {
		return f.rsyncAll(ctx, b.tree, rsyncPushDir)
	}}
	cs := []contender{droverPush, rsync}
	reset := func(int) error {
		if err := f.removeEverywhere(droverPushDir); err != nil {
			return err
		}
		return f.removeEverywhere(rsyncPushDir)
	}

	b.progress("push, %d hosts: first push into empty workdirs, %d runs each (drover push, rsync x %d)", f.N, b.pushReps, f.N)
	first, _ := compare(ctx, cs, compareOptions{Reps: b.pushReps, Before: reset, Progress: b.progress, Settle: f.settle, ServerCPU: f.sshdCPU})
	b.checkPushed(f, first)
	if first[0].MaxRSS > 0 {
		b.pushRSS = append(b.pushRSS, Row{Section: "resources", N: f.N, What: "drover push peak RSS (first push)",
			Drover: Measure{Value: float64(first[0].MaxRSS) / 1024, Unit: MiB, N: len(first[0].Times)}})
	}
	b.progress("push, %d hosts: nothing changed, %d runs each", f.N, b.reps)
	same, _ := compare(ctx, cs, compareOptions{Reps: b.reps, Progress: b.progress, Settle: f.settle, ServerCPU: f.sshdCPU})
	b.progress("push, %d hosts: one file changed, %d runs each", f.N, b.reps)
	one, _ := compare(ctx, cs, compareOptions{Reps: b.reps, Progress: b.progress, Settle: f.settle, ServerCPU: f.sshdCPU,
		Before: func(rep int) error { return changeOne(b.tree, defaultTree, rep) }})
	// The tree now differs from the generated one by the changed file:
	// the next fleet's first push is checked against what is there now.
	if files, size, err := treeSize(b.tree); err == nil {
		b.treeFiles, b.treeBytes = files, size
	} else {
		b.note("measure %s after the one-file changes: %v", b.tree, err)
	}
	measures := func(o []outcome) []Measure { return []Measure{o[0].Measure(), o[1].Measure()} }
	out := rows(measures(first), measures(same), measures(one))
	out = append(out, cpuRows("cpu", f.N, "first push", first, 1, "rsync x N")...)
	out = append(out, cpuRows("cpu", f.N, "push, nothing changed", same, 1, "rsync x N")...)
	return append(out, cpuRows("cpu", f.N, "push, one file changed", one, 1, "rsync x N")...)
}

// checkPushed makes sure both tools really delivered the whole tree to the
// first and the last host: a push that is fast because it sent nothing must
// not count.
func (b *bench) checkPushed(f *benchFleet, outs []outcome) {
	for ti, dir := range []string{droverPushDir, rsyncPushDir} {
		if outs[ti].Err != nil || len(outs[ti].Times) == 0 {
			continue
		}
		for _, i := range []int{0, f.N - 1} {
			files, size, err := treeSize(filepath.Join(f.home(i), dir), ".drover")
			switch {
			case err != nil:
				outs[ti].Err = fmt.Errorf("check %s on %s: %w", dir, f.Hosts[i].Name, err)
			case files != b.treeFiles || size != b.treeBytes:
				outs[ti].Err = fmt.Errorf("%s on %s holds %d files, %d bytes; the tree has %d, %d",
					dir, f.Hosts[i].Name, files, size, b.treeFiles, b.treeBytes)
			}
		}
	}
}

// rsyncAll runs one `rsync -a --delete` per host, all at once, and returns
// when the last has finished: what a user without drover would script.
func (f *benchFleet) rsyncAll(ctx context.Context, src, dest string) (procStats, error) {
	addrs := f.Addrs()
	errs := make([]error, len(addrs))
	cpus := make([]time.Duration, len(addrs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st procStats
			st, errs[i] = command{Args: []string{"rsync", "-a", "--delete", "-e", "ssh -F " + f.SSHConfig,
				src + "/", a + ":" + dest + "/"}, Timeout: pushTimeout}.run(ctx)
			cpus[i] = st.CPU
		}()
	}
	wg.Wait()
	st := procStats{Wall: time.Since(start)}
	for _, c := range cpus {
		st.CPU += c
	}
	for i, err := range errs {
		if err != nil {
			return st, fmt.Errorf("rsync to %s: %w", addrs[i], err)
		}
	}
	return st, nil
}
