package main

import (
	"context"
	"strings"
	"time"
)

// fanoutTimeout bounds one `true` on every host; a healthy fleet of 32
// answers a sequential ssh loop in well under this.
const fanoutTimeout = 90 * time.Second

// fanout times `true` on every host three ways in the same run: drover exec,
// pdsh over ssh and a sequential ssh loop. Every tool is a fresh process per
// repetition, so process start and SSH handshakes are part of each figure.
func (b *bench) fanout(ctx context.Context, f *benchFleet) []Row {
	addrs := f.Addrs()
	droverExec := contender{Name: "drover", Run: func(ctx context.Context) (procStats, error) {
		return command{Args: []string{b.drover, "exec", f.Inventory, "--", "true"}, Timeout: fanoutTimeout}.run(ctx)
	}}
	pdsh := contender{Name: "pdsh", Run: func(ctx context.Context) (procStats, error) {
		// -S: exit with the largest remote status, so a failing host is
		// a failure here rather than a fast-looking success.
		return command{Args: []string{"pdsh", "-S", "-R", "ssh", "-w", strings.Join(addrs, ","), "true"},
			Env: f.pdshEnv(), Timeout: fanoutTimeout}.run(ctx)
	}}
	loop := contender{Name: "ssh-loop", Run: func(ctx context.Context) (procStats, error) {
		start := time.Now()
		var total procStats
		for _, a := range addrs {
			st, err := command{Args: []string{"ssh", "-F", f.SSHConfig, a, "true"}, Timeout: fanoutTimeout}.run(ctx)
			if err != nil {
				return total, err
			}
			total.CPU += st.CPU
		}
		total.Wall = time.Since(start)
		return total, nil
	}}
	b.progress("fan-out, %d hosts: `true` on every host, %d runs each (drover exec, pdsh, ssh loop)", f.N, b.reps)
	outs, _ := compare(ctx, []contender{droverExec, pdsh, loop}, compareOptions{
		Reps: b.reps, Warmup: true, Progress: b.progress, Settle: f.settle, ServerCPU: f.sshdCPU,
	})
	target := Target{}
	if f.N == 16 {
		target = Target{MinSpeedup: 5}
	}
	return append([]Row{
		{Section: "fan-out", N: f.N, What: "`true` on every host", Drover: outs[0].Measure(),
			Baseline: "pdsh -R ssh", BaselineTime: outs[1].Measure(), Target: target},
		{Section: "fan-out", N: f.N, What: "`true` on every host", Drover: outs[0].Measure(),
			Baseline: "ssh loop", BaselineTime: outs[2].Measure()},
	}, cpuRows("cpu", f.N, "exec `true`", outs, 1, "pdsh -R ssh")...)
}
