package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTargets: each kind of goal prints as the issue states it and is
// judged on the right side of its bound.
func TestTargets(t *testing.T) {
	sec := func(v float64) Measure { return Measure{Value: v, Unit: Seconds, N: 3} }
	for _, tc := range []struct {
		name   string
		row    Row
		target string
		met    string
	}{
		{"no slower, faster", Row{Drover: sec(1), Baseline: "ssh", BaselineTime: sec(1.2), Target: Target{MinSpeedup: 1}}, "no slower", "yes"},
		{"no slower, slower", Row{Drover: sec(1.3), Baseline: "ssh", BaselineTime: sec(1.2), Target: Target{MinSpeedup: 1}}, "no slower", "no"},
		{"under 2x, 1.9x", Row{Drover: sec(1.9), Baseline: "ssh", BaselineTime: sec(1), Target: Target{MinSpeedup: 0.5}}, "< 2x baseline", "yes"},
		{"under 2x, exactly 2x", Row{Drover: sec(2), Baseline: "ssh", BaselineTime: sec(1), Target: Target{MinSpeedup: 0.5}}, "< 2x baseline", "no"},
		{"RTT ceiling met", Row{Drover: Measure{Value: 29, Unit: RTT, N: 1}, Target: Target{Max: 30, Unit: RTT}}, "< 30.0 RTT", "yes"},
		{"RTT ceiling missed", Row{Drover: Measure{Value: 31, Unit: RTT, N: 1}, Target: Target{Max: 30, Unit: RTT}}, "< 30.0 RTT", "no"},
		{"MiB ceiling", Row{Drover: Measure{Value: 34, Unit: MiB, N: 1}, Target: Target{Max: 100, Unit: MiB}}, "< 100.0 MiB", "yes"},
		{"ms ceiling missed", Row{Drover: Measure{Value: 12, Unit: Millis, N: 1}, Target: Target{Max: 10, Unit: Millis}}, "< 10.0 ms", "no"},
		{"no figure", Row{Drover: na("failed"), Target: Target{Max: 10, Unit: Millis}}, "< 10.0 ms", "n/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.target, tc.row.Target.String())
			assert.Equal(t, tc.met, tc.row.Met())
		})
	}
}

// TestRatioOnlyForTimes: the RATIO column compares times (and round
// trips), not ratios or memory.
func TestRatioOnlyForTimes(t *testing.T) {
	r := Row{Drover: Measure{Value: 1.2, Unit: Ratio, N: 1}, Baseline: "pdsh", BaselineTime: Measure{Value: 1.5, Unit: Ratio, N: 1}}
	assert.Equal(t, "-", r.ratioString())
	r = Row{Drover: Measure{Value: 8, Unit: RTT, N: 1}, Baseline: "ssh", BaselineTime: Measure{Value: 10, Unit: RTT, N: 1}}
	assert.Equal(t, "1.25x", r.ratioString())
	assert.Equal(t, "8.0 RTT", r.Drover.String())
	assert.Equal(t, "1.20x", Measure{Value: 1.2, Unit: Ratio, N: 1}.String())
	assert.Equal(t, "2.5 ms", Measure{Value: 2.5, Unit: Millis, N: 1}.String())
}
