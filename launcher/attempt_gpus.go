package launcher

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/plan"
)

// The GPUs of an attempt (see attempt): probed and selected for the plan,
// and, after a failed attempt, waited for until the job's processes have
// released them.

// selectGPUs probes hosts with gpus = "auto" and applies the selection
// rules; GPU-less hosts need no probe. Hosts with pinned GPUs are probed
// too, only to learn which processes were on their GPUs before the attempt
// (see waitGPUsReleased).
func (p *planPhase) selectGPUs(ctx context.Context, conns []*attemptHost) (map[string]plan.HostGPUs, error) {
	var mu sync.Mutex
	out := map[string]plan.HostGPUs{}
	p.gpuBefore = map[string]map[int][]int{}
	err := forEach(conns, func(c *attemptHost) error {
		hg := plan.HostGPUs{Indices: c.host.GPUs.List, Probed: true}
		var before map[int][]int
		if c.host.GPUs.Auto || len(c.host.GPUs.List) > 0 {
			rep := remote.ProbeInstalled(ctx, c.t, c.agent)
			before = gpu.Pids(rep)
			if c.host.GPUs.Auto {
				sel, err := gpu.Select(c.host.Name, gpuPolicy(c.host, p.cfg.Job), rep)
				if err != nil {
					return fmt.Errorf("select GPUs on %s: %w", hostLabel(c.host), err)
				}
				hg.Indices = sel.Indices
				if len(sel.Indices) == 0 && rep.Reason != "" {
					p.events.printf("%s: %s has no usable GPU (%s); planning it as a CPU host", p.prefix(), c.host.Name, rep.Reason)
				}
			}
		}
		mu.Lock()
		out[c.host.Name] = hg
		p.gpuBefore[c.host.Name] = before
		mu.Unlock()
		return nil
	})
	return out, err
}

// gpuReleaseWait bounds the wait for a stopped attempt's GPUs to be free.
const gpuReleaseWait = 30 * time.Second

func orUnknown(s string) string {
	if s == "" {
		return "name unknown"
	}
	return s
}
