package launcher

import (
	"context"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// Probe is `drover probe`: it dials hosts, probes the reachable ones in
// parallel (installing the agent from bin's directory) and selects
// GPUs on each. An unreachable host is a result with an error, not a
// reason to stop: the point of probe is to show the whole fleet.
func Probe(ctx context.Context, job config.Job, hosts []config.Host, dial cluster.DialOptions, bin string) []gpu.HostResult {
	ts, errs := cluster.DialAll(ctx, config.Endpoints(hosts), dial)
	var up []cluster.Transport
	for i := range hosts {
		if errs[i] == nil {
			up = append(up, ts[i])
		}
	}
	defer func() {
		for _, t := range up {
			t.Close()
		}
	}()
	reps := remote.ProbeAll(ctx, up, remote.FindAgents(bin))
	results := make([]gpu.HostResult, len(hosts))
	next := 0
	for i, h := range hosts {
		if errs[i] != nil {
			results[i] = gpu.HostResult{
				Report: gpu.HostReport{Host: h.Name, Source: gpu.SourceNone, Devices: []gpu.Device{}, Reason: "not probed"},
				Err:    errs[i], // names the host and address already
			}
			continue
		}
		rep := reps[next]
		next++
		sel, err := gpu.Select(h.Name, gpuPolicy(h, job), rep)
		results[i] = gpu.HostResult{Report: rep, Selection: sel, Err: err}
	}
	return results
}
