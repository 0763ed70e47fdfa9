package fanout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/hostio"
)

// Probe is `drover probe`: it dials hosts, probes the reachable ones in
// parallel (installing the agent from bin's directory) and selects
// GPUs on each. An unreachable host is a result with an error, not a
// reason to stop: the point of probe is to show the whole fleet.
func Probe(ctx context.Context, job config.Job, hosts []config.Host, dial cluster.DialOptions, bin string) []gpu.HostResult {
	return probe(ctx, job, hosts, dial, bin, false)
}

// ProbeHealth is `drover probe --health`: Probe, and every reachable
// host's GPU health as the gate reads it (agent health), merged into its
// report, with the findings the job's ignore_xids make of it. Every Xid
// in the kernel log is shown, not only new ones.
func ProbeHealth(ctx context.Context, job config.Job, hosts []config.Host, dial cluster.DialOptions, bin string) []gpu.HostResult {
	return probe(ctx, job, hosts, dial, bin, true)
}

func probe(ctx context.Context, job config.Job, hosts []config.Host, dial cluster.DialOptions, bin string, health bool) []gpu.HostResult {
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
	agents := remote.FindAgents(bin)
	reps := remote.ProbeAll(ctx, up, agents)
	var wg sync.WaitGroup
	for i, t := range up {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addLeases(ctx, t, agents, &reps[i])
			if health {
				addHealth(ctx, t, agents, &reps[i])
			}
		}()
	}
	wg.Wait()
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
		sel, err := gpu.Select(h.Name, hostio.GPUPolicy(h, job), rep)
		sel = skipLeased(sel, rep)
		results[i] = gpu.HostResult{Report: rep, Selection: sel, Err: err}
		if health {
			// The kernel log's Xids are listed, not judged: a run judges
			// only those that appear after it started.
			counters := rep
			counters.XIDs = nil
			results[i].Findings = gpu.CheckHealth(counters, gpu.HealthPolicy{IgnoreXIDs: job.IgnoreXIDs, Idle: true})
			if results[i].Findings == nil {
				results[i].Findings = []gpu.Finding{}
			}
		}
	}
	return results
}

// addHealth reads the GPU health of t's host and merges it into rep: each
// device's counters by index, lost GPUs and Xids; a read that fails is
// said in the report's Reason.
func addHealth(ctx context.Context, t cluster.Transport, agents remote.Agents, rep *gpu.HostReport) {
	path, err := remote.Install(ctx, t, agents)
	var h gpu.HostReport
	if err == nil {
		h, err = remote.Client{T: t, Path: path}.Health(ctx, 0)
	}
	if err != nil {
		rep.Reason = strings.TrimPrefix(rep.Reason+"; health: "+err.Error(), "; ")
		return
	}
	for i := range rep.Devices {
		if d, ok := h.Device(rep.Devices[i].Index); ok {
			rep.Devices[i].Health = d.Health
		}
	}
	rep.LostGPUs, rep.XIDs, rep.XIDSource, rep.XIDReason = h.LostGPUs, h.XIDs, h.XIDSource, h.XIDReason
}

// addLeases names, on each GPU of rep, the drover run that leases it on
// t's host (package gpulease); a host whose leases cannot be read says so
// in the report's Reason.
func addLeases(ctx context.Context, t cluster.Transport, agents remote.Agents, rep *gpu.HostReport) {
	if len(rep.Devices) == 0 {
		return
	}
	path, err := remote.Install(ctx, t, agents)
	var l agent.GPULeaseList
	if err == nil {
		l, err = remote.Client{T: t, Path: path}.GPULeases(ctx, gpulease.DefaultDir)
	}
	if err == nil && l.Error != "" {
		err = errors.New(l.Error)
	}
	if err != nil {
		rep.Reason = strings.TrimPrefix(rep.Reason+"; GPU leases: "+err.Error(), "; ")
		return
	}
	byKey := map[string]gpulease.Holder{}
	for _, h := range l.Leases {
		byKey[h.Key] = h
	}
	for i, d := range rep.Devices {
		key := hostio.LeaseCandidates([]int{d.Index}, *rep)[0].Key
		if h, ok := byKey[key]; ok {
			rep.Devices[i].LeasedBy = fmt.Sprintf("%s by %s (run %s)", h.Job, h.User, h.RunID)
		}
	}
}

// skipLeased moves the GPUs another run leases out of sel, as a run's
// gpus = "auto" skips them.
func skipLeased(sel gpu.Selection, rep gpu.HostReport) gpu.Selection {
	var keep []int
	var devs []gpu.Device
	for _, i := range sel.Indices {
		d, ok := rep.Device(i)
		if ok && d.LeasedBy != "" {
			sel.Skipped = append(sel.Skipped, gpu.Skip{Index: i, Why: "leased"})
			continue
		}
		keep = append(keep, i)
		if ok {
			devs = append(devs, d)
		}
	}
	if len(keep) < len(sel.Indices) {
		sel.Indices, sel.Devices = keep, devs
	}
	return sel
}
