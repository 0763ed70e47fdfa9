package gpulease

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChoose(t *testing.T) {
	four := []Candidate{{0, "g0"}, {1, "g1"}, {2, "g2"}, {3, "g3"}}
	a := Holder{Job: "a", RunID: "ra"}
	tests := []struct {
		name    string
		cands   []Candidate
		held    map[string]Holder
		n, min  int
		want    []int
		holders []int // GPUs named by the *BusyError
	}{
		{name: "all free, all wanted", cands: four, want: []int{0, 1, 2, 3}},
		{name: "n of the free, in order", cands: four, held: map[string]Holder{"g0": a}, n: 2, want: []int{1, 2}},
		{name: "auto skips leased ones", cands: four, held: map[string]Holder{"g1": a, "g3": a}, want: []int{0, 2}},
		{name: "auto with every GPU leased", cands: four[:2], held: map[string]Holder{"g0": a, "g1": a}, holders: []int{0, 1}},
		{name: "n more than free", cands: four[:2], held: map[string]Holder{"g1": a}, n: 2, holders: []int{1}},
		{name: "min more than free", cands: four, held: map[string]Holder{"g1": a, "g2": a, "g3": a}, min: 2, holders: []int{1, 2, 3}},
		{name: "pinned GPU leased", cands: four[2:3], held: map[string]Holder{"g2": a}, n: 1, min: 1, holders: []int{2}},
		{name: "lease of another GPU is no matter", cands: four[2:3], held: map[string]Holder{"g0": a}, n: 1, want: []int{2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Choose(tc.cands, tc.held, tc.n, tc.min)
			if tc.holders != nil {
				var be *BusyError
				require.True(t, errors.As(err, &be), "err %v", err)
				var gpus []int
				for _, h := range be.Holders {
					gpus = append(gpus, h.GPU)
					assert.Equal(t, "ra", h.RunID)
				}
				assert.Equal(t, tc.holders, gpus)
				assert.Contains(t, be.Error(), "--queue")
				return
			}
			require.NoError(t, err)
			var idx []int
			for _, c := range got {
				idx = append(idx, c.Index)
			}
			assert.Equal(t, tc.want, idx)
		})
	}
}

func TestPosition(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	w := func(id string, s int) Waiter {
		return Waiter{Holder: Holder{RunID: id, Since: t0.Add(time.Duration(s) * time.Second)}}
	}
	tests := []struct {
		name    string
		me      Waiter
		ws      []Waiter
		pos, of int
	}{
		{name: "alone", me: w("m", 5), ws: []Waiter{w("m", 5)}, pos: 1, of: 1},
		{name: "not listed yet", me: w("m", 5), pos: 1, of: 1},
		{name: "behind an earlier one", me: w("m", 5), ws: []Waiter{w("a", 1), w("m", 5)}, pos: 2, of: 2},
		{name: "ahead of a later one", me: w("m", 5), ws: []Waiter{w("m", 5), w("z", 9)}, pos: 1, of: 2},
		{name: "same instant: run id decides", me: w("m", 5), ws: []Waiter{w("b", 5), w("m", 5), w("n", 5)}, pos: 2, of: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pos, of := Position(tc.me, tc.ws)
			assert.Equal(t, [2]int{tc.pos, tc.of}, [2]int{pos, of})
		})
	}
}

func TestParseCandidate(t *testing.T) {
	c, err := ParseCandidate("1=GPU-ab12-cd")
	require.NoError(t, err)
	assert.Equal(t, Candidate{1, "GPU-ab12-cd"}, c)
	assert.Equal(t, "1=GPU-ab12-cd", c.String())
	for _, bad := range []string{"", "1", "x=GPU", "1=../x", "1=a.b", "-1=a", "1=a/b"} {
		_, err := ParseCandidate(bad)
		assert.Error(t, err, bad)
	}
}

// TestKeeps: only a live lease of the same run and user makes a take a
// restart's, which skips the queue.
func TestKeeps(t *testing.T) {
	mine := Holder{RunID: "r1", UID: 1000}
	for _, tc := range []struct {
		name string
		live map[string]Holder
		run  string
		want bool
	}{
		{"no lease", nil, "r1", false},
		{"the run's lease", map[string]Holder{"g0": mine}, "r1", true},
		{"another run's", map[string]Holder{"g0": {RunID: "r2", UID: 1000}}, "r1", false},
		{"the same run id, another user's", map[string]Holder{"g0": {RunID: "r1", UID: 1001}}, "r1", false},
		{"no run id", map[string]Holder{"g0": {UID: 1000}}, "", false},
	} {
		assert.Equal(t, tc.want, Keeps(tc.live, tc.run, 1000), tc.name)
	}
}
