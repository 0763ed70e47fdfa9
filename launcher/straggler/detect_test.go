package straggler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/agent"
)

// rank is one rank's reading in a scripted round: its cumulative step,
// CPU seconds and SM clock (0: not read).
type rank struct {
	step  int64
	cpu   float64
	clock float64
}

func rounds(t0 time.Time, rs ...[]rank) [][]Sample {
	var out [][]Sample
	for i, r := range rs {
		var round []Sample
		for j, x := range r {
			s := Sample{Process: "worker-" + string(rune('0'+j)), Host: "h" + string(rune('0'+j/2)), Rank: j,
				At: t0.Add(time.Duration(i) * 5 * time.Second), GPU: j % 2}
			step, cpu := x.step, x.cpu
			s.Step, s.CPUSeconds = &step, &cpu
			if x.clock > 0 {
				c, th := x.clock, uint64(0x40)
				s.SMClock, s.Throttle = &c, &th
			}
			round = append(round, s)
		}
		out = append(out, round)
	}
	return out
}

// steady is n rounds of 6 ranks that step 10 per round and spend cpu[j]
// CPU seconds per step, at clock[j] MHz.
func steady(n int, cpu []float64, clock []float64) [][]rank {
	var out [][]rank
	for i := range n {
		var r []rank
		for j := range cpu {
			r = append(r, rank{step: int64(10 * i), cpu: float64(10*i) * cpu[j], clock: clock[j]})
		}
		out = append(out, r)
	}
	return out
}

func TestDetector(t *testing.T) {
	even := []float64{0.01, 0.01, 0.01, 0.01, 0.01, 0.01}
	burner := []float64{0.01, 0.011, 0.12, 0.009, 0.01, 0.01}
	fast := []float64{1980, 1980, 1980, 1980, 1980, 1980}
	hot := []float64{1980, 1980, 1980, 1100, 1980, 1965}
	p := Policy{Factor: 3, ClockFactor: 1.5}
	cases := []struct {
		name string
		p    Policy
		rs   [][]rank
		// want is, per round, the "process signal" named in it.
		want map[int][]string
	}{
		{"peers alike: nobody", p, steady(8, even, fast), nil},
		{"a CPU burner is named after 3 rounds of deltas", p, steady(6, burner, fast), map[int][]string{3: {"worker-2 cpu"}}},
		{"a throttled GPU is named after 3 rounds", p, steady(6, even, hot), map[int][]string{2: {"worker-3 clock"}}},
		{"factor 0 turns CPU off", Policy{ClockFactor: 1.5}, steady(6, burner, fast), nil},
		{"clock factor 0 turns the clock off", Policy{Factor: 3}, steady(6, even, hot), nil},
		{"below the factor: nobody", Policy{Factor: 15, ClockFactor: 2}, steady(6, burner, hot), nil},
		{"one noisy round names nobody", p, append(append(steady(3, even, fast), noisy(3)), steady(4, even, fast)[3:]...), nil},
		{"two ranks are too few for peers", p, [][]rank{{{0, 0, 0}, {0, 0, 0}}, {{10, 0.1, 0}, {10, 5, 0}}, {{20, 0.2, 0}, {20, 10, 0}}, {{30, 0.3, 0}, {30, 15, 0}}, {{40, 0.4, 0}, {40, 20, 0}}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := New(c.p)
			got := map[int][]string{}
			for i, r := range rounds(time.Unix(1000, 0), c.rs...) {
				named, cleared := d.Observe(r)
				assert.Empty(t, cleared)
				for _, f := range named {
					got[i] = append(got[i], f.Process+" "+string(f.Signal))
				}
			}
			if c.want == nil {
				c.want = map[int][]string{}
			}
			assert.Equal(t, c.want, got)
		})
	}
}

// noisy is round 3 of steady(even) with worker-2 having spent 12x its
// peers' CPU since round 2.
func noisy(i int64) []rank {
	r := steady(int(i)+1, []float64{0.01, 0.01, 0.01, 0.01, 0.01, 0.01}, []float64{1980, 1980, 1980, 1980, 1980, 1980})[i]
	r[2].cpu += 1.1
	return r
}

func TestDetectorMessagesAndClearing(t *testing.T) {
	d := New(Policy{Factor: 3, ClockFactor: 1.5})
	burner := []float64{0.01, 0.01, 0.12, 0.01, 0.01, 0.01}
	fast := []float64{1980, 1980, 1980, 1980, 1980, 1980}
	rs := rounds(time.Unix(1000, 0), steady(4, burner, fast)...)
	var named []Finding
	for _, r := range rs {
		n, _ := d.Observe(r)
		named = append(named, n...)
	}
	require.Len(t, named, 1)
	assert.Equal(t, "straggler: rank 2 (worker-2@h1) spends 12x its peers' CPU per step (0.120s against 0.010s)", named[0].Message)
	assert.Equal(t, []string{named[0].Message}, d.Named())

	// It keeps up again: let go after 3 rounds near, not before.
	last := rs[len(rs)-1]
	var cleared []Finding
	for i := 1; i <= 3; i++ {
		var r []Sample
		for _, s := range last {
			step, cpu := *s.Step+int64(10*i), *s.CPUSeconds+float64(i)*0.1
			s.Step, s.CPUSeconds, s.At = &step, &cpu, s.At.Add(time.Duration(i)*5*time.Second)
			r = append(r, s)
		}
		n, c := d.Observe(r)
		assert.Empty(t, n)
		if i < 3 {
			assert.Empty(t, c, "round %d", i)
		}
		cleared = append(cleared, c...)
	}
	require.Len(t, cleared, 1)
	assert.Equal(t, "worker-2", cleared[0].Process)
	assert.Empty(t, d.Named())

	hot := rounds(time.Unix(2000, 0), steady(3, []float64{0.01, 0.01, 0.01, 0.01, 0.01, 0.01}, []float64{1980, 1980, 1980, 1100, 1980, 1980})...)
	d = New(Policy{Factor: 3, ClockFactor: 1.5})
	named = nil
	for _, r := range hot {
		n, _ := d.Observe(r)
		named = append(named, n...)
	}
	require.Len(t, named, 1)
	assert.Equal(t, "straggler: rank 3 (worker-3@h1) runs GPU 1 at an SM clock of 1100 MHz against its peers' 1980 MHz (hardware thermal slowdown)", named[0].Message)
}

// Round takes each rank's step and CPU from its process, and the slowest
// of the GPUs the plan gave it, or, without, of those its host's sample
// finds its processes on.
func TestRound(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	step, th := int64(7), uint64(0x40)
	at := time.Unix(1000, 0)
	byHost := map[string]agent.TopSample{
		"h0": {Time: at, GPUs: []agent.TopGPU{{Index: 0, SMClockMHz: f(1980)}, {Index: 1, SMClockMHz: f(1100), Throttle: &th}},
			Procs: []agent.TopProc{{Name: "worker-0", Step: &step, CPUSeconds: f(3), GPUs: []int{1}}, {Name: "worker-1", GPUs: []int{1}}}},
	}
	ranks := []Rank{{Process: "worker-0", Host: "h0", Rank: 0}, {Process: "worker-1", Host: "h0", Rank: 1, GPUs: []int{0}}, {Process: "worker-2", Host: "h1", Rank: 2}}
	got := Round(ranks, byHost)
	require.Len(t, got, 2, "h1 was not read: its rank is left out")
	assert.Equal(t, Sample{Process: "worker-0", Host: "h0", Rank: 0, At: at, Step: &step, CPUSeconds: f(3), GPU: 1, SMClock: f(1100), Throttle: &th}, got[0])
	assert.Equal(t, Sample{Process: "worker-1", Host: "h0", Rank: 1, At: at, GPU: 0, SMClock: f(1980)}, got[1])
}
