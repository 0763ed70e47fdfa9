package top

import (
	"context"
	"time"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/straggler"
)

// stragglers judges, every straggler.Every until ctx ends, the processes
// of the hosts' latest samples as a run's straggler watch does (package
// launcher/straggler, with the job's straggler_factor and
// straggler_clock_factor), so that `drover top` names a straggler of a
// run of any controller's, foreground or detached. A process is named by
// its plan name and host: top does not know the plan's ranks.
func (w *Watcher) stragglers(ctx context.Context, p straggler.Policy) {
	if p.Factor <= 0 && p.ClockFactor <= 0 {
		return
	}
	d := straggler.New(p)
	seen := map[string]time.Time{}
	t := time.NewTicker(straggler.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.judge(d, seen)
		}
	}
}

// judge is one round: every reachable host's sample that is new since
// the last round (seen), its processes compared.
func (w *Watcher) judge(d *straggler.Detector, seen map[string]time.Time) {
	byHost := map[string]agent.TopSample{}
	var ranks []straggler.Rank
	for _, h := range w.View().Hosts {
		if !h.Reachable || h.LastSeen.Equal(seen[h.Host]) {
			continue
		}
		seen[h.Host] = h.LastSeen
		byHost[h.Host] = agent.TopSample{Time: h.LastSeen, GPUs: h.GPUs, Procs: h.Procs}
		for _, p := range h.Procs {
			ranks = append(ranks, straggler.Rank{Process: p.Name, Host: h.Host, Rank: -1})
		}
	}
	d.Observe(straggler.Round(ranks, byHost))
	named := d.Named()
	w.mu.Lock()
	w.named = named
	w.mu.Unlock()
}
