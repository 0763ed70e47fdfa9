package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// statusBudget bounds the status section: the detached start, the timed
// status calls and the stop.
const statusBudget = 120 * time.Second

// status measures `drover status --json` (issue 26: under 2 s at 16
// hosts): a detached run of one process per host is started with `drover
// run -d`, status is timed b.reps times after a warm-up (which installs
// nothing: run -d did), and the run is stopped.
func (b *bench) status(ctx context.Context, f *benchFleet) []Row {
	row := func(m Measure) []Row {
		return []Row{{Section: "status", N: f.N, What: "`status --json`, detached run, 1 process per host", Drover: m, Target: Target{Max: 2}}}
	}
	job := filepath.Join(b.work, fmt.Sprintf("status-%d.toml", f.N))
	// A code directory of its own: the generated tree exists only when
	// the push section runs, and status does not measure a push.
	code := filepath.Join(b.work, "status-code")
	if err := os.MkdirAll(code, 0o755); err != nil {
		return row(na("%v", err))
	}
	if err := writeJob(job, f.Inventory, code, "bench-status", []string{"sleep", "600"}, 0, 1); err != nil {
		return row(na("%v", err))
	}
	b.progress("status, %d hosts: `drover run -d`, then `drover status --json`, %d runs after a warm-up", f.N, b.reps)
	start := command{Args: []string{b.drover, "run", "-d", "--quiet", job}, Timeout: 90 * time.Second}
	if _, err := start.run(ctx); err != nil {
		return row(na("run -d: %s", reason(err)))
	}
	defer func() {
		// Stopped whatever the section's time left: a fresh context.
		stop := command{Args: []string{b.drover, "stop", "--abort", job}, Timeout: 60 * time.Second}
		if _, err := stop.run(context.WithoutCancel(ctx)); err != nil {
			b.note("status: drover stop %s: %s", job, reason(err))
		}
	}()
	once := command{Args: []string{b.drover, "status", "--json", job}, Timeout: 30 * time.Second}
	var walls []time.Duration
	for i := 0; i <= b.reps; i++ {
		st, err := once.run(ctx)
		if err != nil {
			return row(na("%s", reason(err)))
		}
		if i > 0 {
			walls = append(walls, st.Wall)
		}
	}
	return row(medianOr(walls))
}

// statusSection says whether the status section runs on a fleet of n
// hosts.
func (b *bench) statusSection(n int) bool {
	return b.sections["status"] && slices.Contains([]int{b.statusN}, n)
}
