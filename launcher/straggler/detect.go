package straggler

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/droverhq/drover/gpu"
)

// Sample is one rank as one round read it. A nil pointer is a value the
// round could not read.
type Sample struct {
	// Process and Host name the rank ("worker-2", "h2"); Rank is its
	// torch.distributed rank, -1 where it has none.
	Process string
	Host    string
	Rank    int
	// At is when the host read it (its clock: differences only).
	At time.Time
	// Step is the last step=N of its DROVER_PROGRESS_FILE; CPUSeconds
	// its process group's CPU time so far.
	Step       *int64
	CPUSeconds *float64
	// GPU is its slowest GPU's index, SM clock (MHz) and throttle
	// reasons bitmask.
	GPU      int
	SMClock  *float64
	Throttle *uint64
}

// Policy is when a rank is named.
type Policy struct {
	// Factor is how many times its peers' median CPU per step a rank
	// spends (or how many times slower it steps) to be far from them;
	// 0 turns the CPU and step rate signals off.
	Factor float64
	// ClockFactor is how many times its peers' median SM clock a GPU
	// runs below to be far from them; 0 turns the clock signal off.
	ClockFactor float64
	// Rounds is how many rounds running a rank must be far to be named,
	// and near to be let go (the hysteresis: one noisy round neither
	// names nor clears). Below 1 it is DefaultRounds.
	Rounds int
}

// DefaultRounds is Policy.Rounds' default.
const DefaultRounds = 3

// minPeers is how many other ranks a signal needs for a median.
const minPeers = 2

// cpuFloor is the least CPU per step the peers' median counts as: below
// a millisecond per step (a GPU job's rank between kernel launches) the
// clock ticks of /proc (10 ms) are noise, not a cost.
const cpuFloor = 0.001

// Signal is what made a rank a straggler.
type Signal string

// The signals.
const (
	CPU   Signal = "cpu"
	Rate  Signal = "rate"
	Clock Signal = "clock"
)

// Finding is a rank named (or let go) for one signal.
type Finding struct {
	Process string
	Host    string
	Rank    int
	Signal  Signal
	// Ratio is how far it stands from its peers (times).
	Ratio float64
	// Message is the event's line ("straggler: rank 2 (worker-2@h2)
	// spends 12x its peers' CPU per step ...").
	Message string
}

// Detector keeps what judging the next round needs: each rank's last
// sample, and how many rounds running each rank and signal was far
// (strikes) or, once named, near (clean).
type Detector struct {
	p      Policy
	prev   map[string]Sample
	strike map[key]int
	clean  map[key]int
	// named holds the message each named rank and signal was named
	// with.
	named map[key]string
}

type key struct {
	process string
	signal  Signal
}

// New returns a Detector for p.
func New(p Policy) *Detector {
	if p.Rounds < 1 {
		p.Rounds = DefaultRounds
	}
	return &Detector{p: p, prev: map[string]Sample{}, strike: map[key]int{}, clean: map[key]int{}, named: map[key]string{}}
}

// measure is one rank's value of one signal in a round.
type measure struct {
	s     Sample
	value float64
}

// Observe judges one round (every rank once) and returns the ranks it
// names now and those it lets go now. A rank already named is not named
// again while it stays far.
func (d *Detector) Observe(round []Sample) (named, cleared []Finding) {
	var cpu, rate, clock []measure
	for _, s := range round {
		if prev, ok := d.prev[s.Process]; ok && s.Step != nil && prev.Step != nil && *s.Step > *prev.Step {
			steps := float64(*s.Step - *prev.Step)
			if s.CPUSeconds != nil && prev.CPUSeconds != nil && *s.CPUSeconds >= *prev.CPUSeconds {
				cpu = append(cpu, measure{s, (*s.CPUSeconds - *prev.CPUSeconds) / steps})
			}
			if dt := s.At.Sub(prev.At).Seconds(); dt > 0 {
				rate = append(rate, measure{s, steps / dt})
			}
		}
		if s.SMClock != nil && *s.SMClock > 0 {
			clock = append(clock, measure{s, *s.SMClock})
		}
		d.prev[s.Process] = s
	}
	far := map[key]Finding{}
	if d.p.Factor > 0 {
		judge(cpu, CPU, func(v, med float64) float64 { return v / max(med, cpuFloor) }, d.p.Factor, far)
		judge(rate, Rate, func(v, med float64) float64 { return med / v }, d.p.Factor, far)
	}
	if d.p.ClockFactor > 0 {
		judge(clock, Clock, func(v, med float64) float64 { return med / v }, d.p.ClockFactor, far)
	}
	return d.step(round, far)
}

// judge adds to far each rank of ms whose ratio to its peers' median
// (by ratio) reaches factor.
func judge(ms []measure, sig Signal, ratio func(v, med float64) float64, factor float64, far map[key]Finding) {
	if len(ms) < minPeers+1 {
		return
	}
	for i, m := range ms {
		peers := make([]float64, 0, len(ms)-1)
		for j, o := range ms {
			if j != i {
				peers = append(peers, o.value)
			}
		}
		med := median(peers)
		if m.value <= 0 || med <= 0 {
			continue
		}
		if r := ratio(m.value, med); r >= factor {
			far[key{m.s.Process, sig}] = Finding{Process: m.s.Process, Host: m.s.Host, Rank: m.s.Rank, Signal: sig, Ratio: r,
				Message: message(m.s, sig, r, m.value, med)}
		}
	}
}

// step moves every rank's strikes and clean rounds by this round's far
// set: Rounds far in a row names it, Rounds near in a row (while named)
// lets it go. A rank missing from the round counts neither way.
func (d *Detector) step(round []Sample, far map[key]Finding) (named, cleared []Finding) {
	for _, s := range round {
		for _, sig := range []Signal{CPU, Rate, Clock} {
			k := key{s.Process, sig}
			f, isFar := far[k]
			switch {
			case isFar:
				d.strike[k]++
				d.clean[k] = 0
				if d.named[k] == "" && d.strike[k] >= d.p.Rounds {
					d.named[k] = f.Message
					named = append(named, f)
				}
			default:
				d.strike[k] = 0
				if d.named[k] != "" {
					d.clean[k]++
					if d.clean[k] >= d.p.Rounds {
						delete(d.named, k)
						d.clean[k] = 0
						cleared = append(cleared, Finding{Process: s.Process, Host: s.Host, Rank: s.Rank, Signal: sig,
							Message: fmt.Sprintf("straggler no more: %s keeps up with its peers again (%s)", who(s), sig)})
					}
				}
			}
		}
	}
	return named, cleared
}

// Named is the message of every rank and signal named now, sorted: what
// the run record shows to drover status.
func (d *Detector) Named() []string {
	var out []string
	for _, m := range d.named {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// who names a rank as events do: "rank 2 (worker-2@h2)", or
// "worker-2@h2" without a rank.
func who(s Sample) string {
	if s.Rank < 0 {
		return s.Process + "@" + s.Host
	}
	return fmt.Sprintf("rank %d (%s@%s)", s.Rank, s.Process, s.Host)
}

func message(s Sample, sig Signal, ratio, v, med float64) string {
	switch sig {
	case CPU:
		return fmt.Sprintf("straggler: %s spends %.0fx its peers' CPU per step (%.3fs against %.3fs)", who(s), ratio, v, med)
	case Rate:
		return fmt.Sprintf("straggler: %s steps %.1fx slower than its peers (%.2f steps/s against %.2f)", who(s), ratio, v, med)
	}
	m := fmt.Sprintf("straggler: %s runs GPU %d at an SM clock of %.0f MHz against its peers' %.0f MHz", who(s), s.GPU, v, med)
	if s.Throttle != nil {
		if r := throttleReasons(*s.Throttle); r != "" {
			m += " (" + r + ")"
		}
	}
	return m
}

// throttleReasons names the slowdown bits of a throttle reasons mask.
func throttleReasons(mask uint64) string {
	var names []string
	for _, t := range []struct {
		bit  uint64
		name string
	}{
		{gpu.ThrottleHWThermal, "hardware thermal slowdown"},
		{gpu.ThrottleSWThermal, "software thermal slowdown"},
		{gpu.ThrottleHWPowerBrake, "hardware power brake slowdown"},
		{gpu.ThrottleHWSlowdown, "hardware slowdown"},
		{0x4, "software power cap"},
	} {
		if mask&t.bit != 0 {
			names = append(names, t.name)
		}
	}
	return strings.Join(names, ", ")
}
