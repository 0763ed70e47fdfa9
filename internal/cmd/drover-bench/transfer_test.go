package main

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Staging onto 8 hosts is judged against staging onto 1 in the same run
// (at most 1.5 times as long), with the hosts' links limited against the
// same with them limited; a direct copy against the relay, and the
// controller's peak RSS against 100 MiB.
func TestTransferRows(t *testing.T) {
	one := transferCase{Kind: "stage", Entry: "one-2G", Targets: 1}
	eight := transferCase{Kind: "stage", Entry: "one-2G", Targets: 8}
	direct := transferCase{Kind: "copy", Entry: "one-200M", Targets: 2}
	relay := direct
	relay.Relay = true
	linkOne, linkEight := one, eight
	linkOne.Link, linkEight.Link = "400mbit", "400mbit"
	for _, tc := range []struct {
		eight float64
		met   string
	}{{1.4, "yes"}, {1.6, "no"}} {
		rows := transferRows([]transferResult{
			{Case: one, Seconds: 1, MaxRSS: 30, HostsCPU: 1},
			{Case: eight, Seconds: tc.eight, MaxRSS: 130},
			{Case: direct, Seconds: 1.2, MaxRSS: 30},
			{Case: relay, Seconds: 70, MaxRSS: 30},
			{Case: linkOne, Seconds: 50, MaxRSS: 30, HostsCPU: 8},
			{Case: linkEight, Seconds: 50 * tc.eight, MaxRSS: 30, HostsCPU: 36},
		})
		byWhat := map[string]Row{}
		for _, r := range rows {
			byWhat[r.What] = r
		}
		r, ok := byWhat[eight.String()]
		require.True(t, ok)
		assert.Equal(t, tc.met, r.Met(), "%.1f s onto 8 vs 1 s onto 1", tc.eight)
		assert.Equal(t, "no", byWhat[eight.String()+": controller peak RSS"].Met())
		assert.Equal(t, "yes", byWhat[one.String()+": controller peak RSS"].Met())
		assert.InDelta(t, 70/1.2, byWhat[direct.String()].Ratio(), 0.01)
		assert.Contains(t, byWhat, one.String()+fmt.Sprintf(": wall time / hosts' CPU floor (%d cores)", runtime.NumCPU()))
		r, ok = byWhat[linkEight.String()]
		require.True(t, ok)
		assert.Equal(t, tc.met, r.Met(), "against onto 1 with the same links")
		assert.InDelta(t, 4000, byWhat[linkEight.String()+": hosts' CPU per host"].Drover.Value, 0.01, "36 CPU-seconds over 9 hosts")
		assert.InDelta(t, 50/(2.0*(1<<30)*8/400e6), byWhat[linkOne.String()+": wall time / link floor (size / link rate)"].Drover.Value, 0.01)
	}
}

// A data staging onto 2, 4 or 8 hosts is judged against onto 1 (at most
// 1.5 times as long), and staging again with nothing changed against 3 s.
func TestDataRows(t *testing.T) {
	cases := dataCases("shards-200M", "400mbit")
	require.Len(t, cases, 4)
	results := []transferResult{{Case: cases[0], Seconds: 5, Again: 0.4}, {Case: cases[1], Seconds: 7, Again: 0.5},
		{Case: cases[2], Seconds: 8, Again: 3.5}, {Case: cases[3], Err: "boom"}}
	byWhat := map[string]Row{}
	for _, r := range transferRows(results) {
		byWhat[r.What] = r
	}
	assert.Equal(t, "-", byWhat[cases[0].String()].Met(), "onto 1 is the baseline")
	assert.Equal(t, "yes", byWhat[cases[1].String()].Met(), "7 s against 5 s")
	assert.Equal(t, "no", byWhat[cases[2].String()].Met(), "8 s against 5 s")
	assert.Equal(t, "yes", byWhat[cases[1].String()+": again, nothing changed"].Met())
	assert.Equal(t, "no", byWhat[cases[2].String()+": again, nothing changed"].Met())
	assert.False(t, byWhat[cases[3].String()].Drover.OK())
	assert.NotContains(t, byWhat, cases[3].String()+": again, nothing changed")
}
