package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
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

// findings judges a health read of host: the counters, and the Xids not
// judged before. idle says the read was taken before the attempt started.
func (a *attempt) findings(rep gpu.HostReport, idle bool) []gpu.Finding {
	rep.XIDs = a.r.newXIDs(rep.Host, rep.XIDs)
	return gpu.CheckHealth(rep, gpu.HealthPolicy{IgnoreXIDs: a.cfg.Job.IgnoreXIDs, Idle: idle})
}

// warn prints a finding as a warning event; a critical one names the
// mode that lets it train.
func (a *attempt) warn(f gpu.Finding) {
	note := ""
	if f.Critical {
		note = ` (critical; health = "warn" lets it train)`
	}
	a.r.events.printf("%s: warning: GPU health: %s%s", a.prefix(), f, note)
}

// healthGate reads every GPU host's health before the attempt starts.
// Under "enforce" hosts with a critical finding (or fenced earlier in the
// run) make it return an *UnhealthyError; a host whose health cannot be
// read is let through with an event (the probe decides about its GPUs).
func (a *attempt) healthGate(ctx context.Context, conns []*attemptHost) error {
	mode := a.cfg.Job.Health
	if mode == config.HealthOff {
		return nil
	}
	bad := make([]*gpu.Finding, len(conns))
	forEach(conns, func(c *attemptHost) error {
		i := slices.Index(conns, c)
		if f, ok := a.r.fencedFor(c.host.Name); ok && mode == config.HealthEnforce {
			bad[i] = &f
			return nil
		}
		if !hasGPUs(c.host) {
			return nil
		}
		rep, err := c.client().Health(ctx, 0)
		if err != nil {
			a.r.events.printf("%s: %v; going on without its health", a.prefix(), err)
			return nil
		}
		for _, f := range a.findings(rep, true) {
			if f.Critical && mode == config.HealthEnforce {
				if bad[i] == nil {
					bad[i] = &f
				}
				a.r.events.printf("%s: GPU health: %s", a.prefix(), f)
				continue
			}
			a.warn(f)
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

// keepOut handles a gate's *UnhealthyError: each host is fenced and a
// spare takes its place, and the attempt is set up again (outcomeFenced);
// without a spare for every one the run fails before anything starts.
func (a *attempt) keepOut(ue *UnhealthyError) attemptOutcome {
	a.r.pool.forgetPrepared()
	for _, f := range ue.Findings {
		a.r.fence(f.Host, f)
		spare, ok := a.standIn(f.Host)
		if !ok {
			err := fmt.Errorf("%w; health = \"enforce\" keeps %s out and no spare host is left: fix the GPU, add a host with spare = true, or set health = \"warn\" to train on it anyway",
				ue, f.Host)
			a.r.events.printf("%s: %v", a.prefix(), err)
			return attemptOutcome{kind: outcomeSetupFailed, err: err, exitCode: -1, permanent: true}
		}
		a.r.events.printf("%s: %s kept out (GPU health: %s %s); replaced by spare %s", a.prefix(), f.Host, f.GPU, f.What, spare)
	}
	return attemptOutcome{kind: outcomeFenced, exitCode: -1, err: ue}
}

// standIn makes the first free spare stand in for host (a participant,
// or a spare standing in for one) from the next setup on, and returns its
// name; false when no spare is free.
func (a *attempt) standIn(host string) (string, bool) {
	spare, ok := a.freeSpare()
	if !ok {
		return "", false
	}
	a.r.replaced[a.r.standsFor(host)] = spare.Name
	return spare.Name, true
}

// freeSpare is the first spare host that is not in use, replaced or
// fenced.
func (a *attempt) freeSpare() (config.Host, bool) {
	used := map[string]bool{}
	for _, v := range a.r.replaced {
		used[v] = true
	}
	for _, h := range a.cfg.Hosts {
		if _, bad := a.r.fencedFor(h.Name); h.Spare && !used[h.Name] && !bad {
			return h, true
		}
	}
	return config.Host{}, false
}

// standsFor is the inventory host that name stands in for: itself, or the
// host a spare of that name replaced.
func (r *runner) standsFor(name string) string {
	for orig, sp := range r.replaced {
		if sp == name {
			return orig
		}
	}
	return name
}

// healthRead is one read of a running attempt's host.
type healthRead struct {
	host string
	rep  gpu.HostReport
}

// healthWatchers are, by host, the process whose agent watches the
// host's GPU health (agent.RunOptions.HealthFile): the first one of each
// host that the plan gives GPUs. Hosts planned without GPUs (a CPU host
// with gpus = "auto") are not watched.
func (s *supervisor) healthWatchers() map[string]string {
	out := map[string]string{}
	if s.a.cfg.Job.Health == config.HealthOff {
		return out
	}
	for _, p := range s.pl.Processes {
		if _, ok := out[p.Host.Name]; !ok && len(p.Visible) > 0 {
			out[p.Host.Name] = p.Name()
		}
	}
	return out
}

// healthFile is where the watching agent of attempt n writes the host's
// health, under its workdir wd.
func healthFile(wd string, n int) string {
	return path.Join(wd, ".drover/logs", fmt.Sprintf("attempt-%d", n), "health.json")
}

// watchHealth reads each watched host's health file every healthEvery,
// over the host's file access, until ctx ends, and hands each read to
// out. A file not written yet (the watch starts with the process) is
// skipped.
func (s *supervisor) watchHealth(ctx context.Context, out chan<- healthRead) {
	for host := range s.healthWatchers() {
		c := s.byHost[host]
		file := healthFile(remoteAbs(c.home, c.host.Workdir), s.a.n)
		go func() {
			for sleepCtx(ctx, healthEvery) == nil {
				rep, err := readHealthFile(c.fs, file)
				if err != nil {
					continue
				}
				rep.Host = host
				select {
				case out <- healthRead{host: host, rep: rep}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
}

// readHealthFile reads one report the health watch wrote.
func readHealthFile(fsys cluster.FS, file string) (gpu.HostReport, error) {
	f, err := fsys.Open(file)
	if err != nil {
		return gpu.HostReport{}, err
	}
	defer f.Close()
	var rep gpu.HostReport
	if err := json.NewDecoder(io.LimitReader(f, 4<<20)).Decode(&rep); err != nil {
		return gpu.HostReport{}, fmt.Errorf("read %s: %w", file, err)
	}
	return rep, nil
}

// onHealth judges a read while the attempt runs: under "enforce" a
// critical finding fences the host and stops the group (a host failure);
// warnings are printed once per attempt.
func (s *supervisor) onHealth(h healthRead) {
	if s.stopping {
		return
	}
	for _, f := range s.a.findings(h.rep, false) {
		if f.Critical && s.a.cfg.Job.Health == config.HealthEnforce {
			s.a.r.fence(h.host, f)
			reason := fmt.Sprintf("GPU health: %s; health = \"enforce\" keeps %s out: the group restarts without it", f, h.host)
			// Its spare is chosen now, so that the restart sets up
			// (pushes to, stages the checkpoint on) the spare, not it.
			if spare, ok := s.a.standIn(h.host); ok {
				reason += ", on spare " + spare
			}
			s.stop(attemptOutcome{kind: outcomeHostLost, err: errors.New(reason), exitCode: -1}, reason)
			return
		}
		if key := f.String(); !s.warned[key] {
			s.warned[key] = true
			s.a.warn(f)
		}
	}
}
