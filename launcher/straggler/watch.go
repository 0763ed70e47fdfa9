package straggler

import (
	"context"
	"sync"
	"time"

	"github.com/droverhq/drover/launcher/agent"
)

// Every is the time between two rounds of samples: with DefaultRounds a
// straggler is named some 20 s after it starts to fall behind, and each
// host pays one `drover agent top` every Every.
const Every = 5 * time.Second

// Rank is one process of the group as Watch samples it.
type Rank struct {
	Process string
	Host    string
	Rank    int
	// GPUs are the indices (on its host) of the GPUs the plan gave it;
	// without them, those its host's sample finds its processes on.
	GPUs []int
}

// Sampler reads one host's sample (`drover agent top` once over the
// connection the run holds).
type Sampler func(ctx context.Context, host string) (agent.TopSample, error)

// WatchOptions say what Watch watches and whom it tells.
type WatchOptions struct {
	Ranks  []Rank
	Sample Sampler
	Policy Policy
	// Every is the time between rounds; 0 is Every.
	Every time.Duration
	// Named and Cleared are told each finding, in Watch's goroutine.
	Named, Cleared func(Finding)
	// Changed, when set, is told the messages of every rank named after
	// a round that named or let go one (Detector.Named).
	Changed func(named []string)
}

// Watch samples every host each round until ctx ends, and tells o who
// the Detector names and lets go. A host that cannot be read in a round
// leaves its ranks out of it.
func Watch(ctx context.Context, o WatchOptions) {
	every := o.Every
	if every <= 0 {
		every = Every
	}
	d := New(o.Policy)
	hosts := map[string]bool{}
	for _, r := range o.Ranks {
		hosts[r.Host] = true
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		named, cleared := d.Observe(Round(o.Ranks, sampleHosts(ctx, hosts, o.Sample, every)))
		for _, f := range named {
			o.Named(f)
		}
		for _, f := range cleared {
			o.Cleared(f)
		}
		if o.Changed != nil && len(named)+len(cleared) > 0 {
			o.Changed(d.Named())
		}
	}
}

// sampleHosts reads every host at once, each within limit.
func sampleHosts(ctx context.Context, hosts map[string]bool, sample Sampler, limit time.Duration) map[string]agent.TopSample {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]agent.TopSample{}
	for h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := sample(ctx, h)
			if err != nil {
				return
			}
			mu.Lock()
			out[h] = s
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// Round turns the hosts' samples into one Sample per rank found in them:
// its process's step and CPU time, and the slowest of its GPUs.
func Round(ranks []Rank, byHost map[string]agent.TopSample) []Sample {
	var out []Sample
	for _, r := range ranks {
		hs, ok := byHost[r.Host]
		if !ok {
			continue
		}
		s := Sample{Process: r.Process, Host: r.Host, Rank: r.Rank, At: hs.Time, GPU: -1}
		gpus := r.GPUs
		for _, p := range hs.Procs {
			if p.Name == r.Process {
				s.Step, s.CPUSeconds = p.Step, p.CPUSeconds
				if len(gpus) == 0 {
					gpus = p.GPUs
				}
			}
		}
		for _, g := range hs.GPUs {
			if !contains(gpus, g.Index) || g.SMClockMHz == nil {
				continue
			}
			if s.SMClock == nil || *g.SMClockMHz < *s.SMClock {
				s.GPU, s.SMClock, s.Throttle = g.Index, g.SMClockMHz, g.Throttle
			}
		}
		out = append(out, s)
	}
	return out
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
