package launcher

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// The GPU health gate (the job's health key): before each attempt every
// GPU host's agent reads its GPUs' health (gpu.Health, and the Xids of
// the kernel log or NVML's events), and while the attempt runs the agent
// of each host's first GPU process reads it every healthEvery into a file
// that drover reads over its file access (no SSH session of its own). Under "enforce" a host with a critical finding is kept
// out of the group for the rest of the run, as a lost host is: before
// the attempt a spare takes its place (without one the run fails before
// anything starts); while it runs the group stops and restarts without
// it, counted against max_host_failures. Warnings, and every finding
// under "warn", are events.

// healthEvery is how often a running attempt's hosts are read (by the
// agent) and their reports looked at (by drover): an Xid 79 stops the
// group within about two of these and a stop.
const healthEvery = 2 * time.Second

// healthState is the runner's memory of GPU health across attempts.
type healthState struct {
	healthMu sync.Mutex
	// xidsSeen holds, per host, the Keys of the Xids already judged; the
	// run's first read of a host only records them (they happened
	// before the run, and the counters say whether they left damage).
	xidsSeen map[string]map[string]bool
	// fenced are the hosts kept out for the rest of the run.
	fenced map[string]gpu.Finding
}

// newXIDs returns the Xids of xs not seen on host before, and marks them.
func (h *healthState) newXIDs(host string, xs []gpu.XID) []gpu.XID {
	h.healthMu.Lock()
	defer h.healthMu.Unlock()
	if h.xidsSeen == nil {
		h.xidsSeen = map[string]map[string]bool{}
	}
	seen, known := h.xidsSeen[host]
	if !known {
		seen = map[string]bool{}
		h.xidsSeen[host] = seen
	}
	var out []gpu.XID
	for _, x := range xs {
		if !seen[x.Key] {
			seen[x.Key] = true
			if known {
				out = append(out, x)
			}
		}
	}
	return out
}

// fence keeps host out for the rest of the run.
func (h *healthState) fence(host string, f gpu.Finding) {
	h.healthMu.Lock()
	defer h.healthMu.Unlock()
	if h.fenced == nil {
		h.fenced = map[string]gpu.Finding{}
	}
	if _, ok := h.fenced[host]; !ok {
		h.fenced[host] = f
	}
}

func (h *healthState) fencedFor(host string) (gpu.Finding, bool) {
	h.healthMu.Lock()
	defer h.healthMu.Unlock()
	f, ok := h.fenced[host]
	return f, ok
}

// UnhealthyError is a gate that kept hosts out of the group: Findings
// holds the first critical finding of each, in host order.
type UnhealthyError struct {
	Findings []gpu.Finding
}

func (e *UnhealthyError) Error() string {
	parts := make([]string, len(e.Findings))
	for i, f := range e.Findings {
		parts[i] = f.String()
	}
	return "GPU health: " + strings.Join(parts, "; ")
}

// hasGPUs says whether h may have GPUs to read: gpus = [] is a CPU host.
func hasGPUs(h config.Host) bool { return h.GPUs.Auto || len(h.GPUs.List) > 0 }

// healthGate reads every GPU host's health before the attempt starts.
// Under "enforce" hosts with a critical finding (or fenced earlier in the
// run) make it return an *UnhealthyError; a host whose health cannot be
// read is let through with an event (the probe decides about its GPUs).
func (p *planPhase) healthGate(ctx context.Context, conns []*attemptHost) error {
	mode := p.cfg.Job.Health
	if mode == config.HealthOff {
		return nil
	}
	bad := make([]*gpu.Finding, len(conns))
	forEach(conns, func(c *attemptHost) error {
		i := slices.Index(conns, c)
		if f, ok := p.fenced(c.host.Name); ok && mode == config.HealthEnforce {
			bad[i] = &f
			return nil
		}
		if !hasGPUs(c.host) {
			return nil
		}
		rep, err := remote.Health(ctx, c.t, c.agent, 0)
		if err != nil {
			p.events.printf("%s: %v; going on without its health", p.prefix(), err)
			return nil
		}
		for _, f := range p.findings(rep, true) {
			if f.Critical && mode == config.HealthEnforce {
				if bad[i] == nil {
					bad[i] = &f
				}
				p.events.printf("%s: GPU health: %s", p.prefix(), f)
				continue
			}
			p.warn(f)
		}
		return nil
	})
	ue := &UnhealthyError{}
	for _, f := range bad {
		if f != nil {
			ue.Findings = append(ue.Findings, *f)
		}
	}
	if len(ue.Findings) == 0 {
		return nil
	}
	return ue
}

// healthRead is one read of a running attempt's host.
type healthRead struct {
	host string
	rep  gpu.HostReport
}
