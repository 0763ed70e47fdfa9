package launcher

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/plan"
)

// The GPUs of an attempt (see attempt): probed and selected for the plan,
// and, after a failed attempt, waited for until the job's processes have
// released them.

// selectGPUs probes hosts with gpus = "auto" and applies the selection
// rules; GPU-less hosts need no probe. Hosts with pinned GPUs are probed
// too, only to learn which processes were on their GPUs before the attempt
// (see waitGPUsReleased).
func (a *attempt) selectGPUs(ctx context.Context, conns []*attemptHost) (map[string]plan.HostGPUs, error) {
	var mu sync.Mutex
	out := map[string]plan.HostGPUs{}
	a.gpuBefore = map[string]map[int][]int{}
	err := forEach(conns, func(c *attemptHost) error {
		hg := plan.HostGPUs{Indices: c.host.GPUs.List, Probed: true}
		var before map[int][]int
		if c.host.GPUs.Auto || len(c.host.GPUs.List) > 0 {
			rep := remote.ProbeInstalled(ctx, c.t, c.agent)
			before = gpu.Pids(rep)
			if c.host.GPUs.Auto {
				sel, err := gpu.Select(c.host.Name, hostio.GPUPolicy(c.host, a.cfg.Job), rep)
				if err != nil {
					return fmt.Errorf("select GPUs on %s: %w", hostLabel(c.host), err)
				}
				hg.Indices = sel.Indices
				if len(sel.Indices) == 0 && rep.Reason != "" {
					a.r.events.printf("%s: %s has no usable GPU (%s); planning it as a CPU host", a.prefix(), c.host.Name, rep.Reason)
				}
			}
		}
		mu.Lock()
		out[c.host.Name] = hg
		a.gpuBefore[c.host.Name] = before
		mu.Unlock()
		return nil
	})
	return out, err
}

// gpuReleaseWait bounds the wait for a stopped attempt's GPUs to be free.
const gpuReleaseWait = 30 * time.Second

// waitGPUsReleased waits, after a failed attempt stopped, until NVML shows
// no process of the job on the job's GPUs, so that the next attempt finds
// its memory free; a GPU still held when the wait ends is reported with
// the holding process.
func (a *attempt) waitGPUsReleased(ctx context.Context, conns []*attemptHost, pl *plan.Plan) {
	used := map[string][]int{}
	for _, p := range pl.Processes {
		for _, g := range p.Visible {
			if !slices.Contains(used[p.Host.Name], g) {
				used[p.Host.Name] = append(used[p.Host.Name], g)
			}
		}
	}
	forEach(conns, func(c *attemptHost) error {
		gpus := used[c.host.Name]
		if len(gpus) == 0 {
			return nil
		}
		probe := func(ctx context.Context) gpu.HostReport { return remote.ProbeInstalled(ctx, c.t, c.agent) }
		for _, h := range gpu.WaitReleased(ctx, probe, gpus, a.gpuBefore[c.host.Name], gpuReleaseWait, time.Second) {
			a.r.events.printf("%s: GPU %d on %s is still held by pid %d (%s) %s after the stop; the next attempt may not get its memory",
				a.prefix(), h.GPU, c.host.Name, h.Process.PID, orUnknown(h.Process.Name), gpuReleaseWait)
		}
		return nil
	})
}

func orUnknown(s string) string {
	if s == "" {
		return "name unknown"
	}
	return s
}
