package sweep

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fleet(n, gpus int) []HostGPUs {
	var f []HostGPUs
	for i := range n {
		h := HostGPUs{Host: string(rune('a' + i))}
		for g := range gpus {
			h.GPUs = append(h.GPUs, g)
		}
		f = append(f, h)
	}
	return f
}

func TestPackPlace(t *testing.T) {
	for _, tc := range []struct {
		name string
		free []HostGPUs
		n    int
		want Placement
		ok   bool
	}{
		{"first host", fleet(3, 2), 1, On("a", 0), true},
		{"fullest host that fits", []HostGPUs{{"a", []int{0, 1}}, {"b", []int{1}}}, 1, On("b", 1), true},
		{"only one fits two", []HostGPUs{{"a", []int{1}}, {"b", []int{0, 1}}}, 2, On("b", 0, 1), true},
		{"lowest indices", []HostGPUs{{"a", []int{3, 1, 2}}}, 2, On("a", 1, 2), true},
		{"none fits", []HostGPUs{{"a", []int{1}}, {"b", nil}}, 2, Placement{}, false},
		{"no fleet", nil, 1, Placement{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := Pack{}.Place(tc.free, Shape{GPUs: tc.n})
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, p)
		})
	}
}

// --hosts-per-trial K: K hosts, the fullest that fit first, each with
// the lowest free GPUs.
func TestPackPlaceHosts(t *testing.T) {
	for _, tc := range []struct {
		name string
		free []HostGPUs
		want Shape
		p    Placement
		ok   bool
	}{
		{"two of three", fleet(3, 2), Shape{GPUs: 2, Hosts: 2},
			Placement{Hosts: []HostGPUs{{"a", []int{0, 1}}, {"b", []int{0, 1}}}}, true},
		{"the fullest that fit", []HostGPUs{{"a", []int{0, 1, 2}}, {"b", []int{1}}, {"c", []int{2, 3}}}, Shape{GPUs: 1, Hosts: 2},
			Placement{Hosts: []HostGPUs{{"b", []int{1}}, {"c", []int{2}}}}, true},
		{"a host short of GPUs is no host", []HostGPUs{{"a", []int{0, 1}}, {"b", []int{1}}, {"c", []int{0, 1}}}, Shape{GPUs: 2, Hosts: 2},
			Placement{Hosts: []HostGPUs{{"a", []int{0, 1}}, {"c", []int{0, 1}}}}, true},
		{"too few hosts free", []HostGPUs{{"a", []int{0, 1}}, {"b", []int{1}}}, Shape{GPUs: 2, Hosts: 2}, Placement{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := Pack{}.Place(tc.free, tc.want)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.p, p)
		})
	}
}

// TestLedgerPacksTwelveTrialsOnSixGPUs places one-GPU trials on 3 hosts
// of 2 GPUs as the runner does: six run at once on six different GPUs, a
// seventh waits until one ends and takes the GPU it freed.
func TestLedgerPacksTwelveTrialsOnSixGPUs(t *testing.T) {
	l := NewLedger(fleet(3, 2))
	var placed []Placement
	for i := range 6 {
		p, ok := Pack{}.Place(l.Free(), Shape{GPUs: 1, Hosts: 1})
		require.True(t, ok, "trial %d", i)
		require.NoError(t, l.Take(string(rune('0'+i)), p))
		placed = append(placed, p)
	}
	assert.Equal(t, []Placement{On("a", 0), On("a", 1), On("b", 0), On("b", 1), On("c", 0), On("c", 1)}, placed)
	_, ok := Pack{}.Place(l.Free(), Shape{GPUs: 1, Hosts: 1})
	assert.False(t, ok, "all six held")
	l.Release("3")
	p, ok := Pack{}.Place(l.Free(), Shape{GPUs: 1, Hosts: 1})
	require.True(t, ok)
	assert.Equal(t, On("b", 1), p)
	assert.EqualError(t, l.Take("x", On("a", 1)), "GPU 1 of a is held by trial 1; trial x cannot take it")
	assert.Equal(t, "b:1", p.String())
}

func TestCheckFits(t *testing.T) {
	require.NoError(t, CheckFits(fleet(3, 2), Shape{GPUs: 2, Hosts: 3}))
	err := CheckFits(fleet(3, 2), Shape{GPUs: 4, Hosts: 1})
	var se *Error
	require.True(t, errors.As(err, &se))
	assert.Equal(t, "--gpus-per-trial: --gpus-per-trial 4 is more than any host has (the most is 2) (fix: ask for at most 2, or add a host with 4 GPUs)", err.Error())
	assert.Error(t, CheckFits(fleet(1, 2), Shape{GPUs: 0, Hosts: 1}))
	err = CheckFits([]HostGPUs{{"a", []int{0, 1}}, {"b", []int{0}}, {"c", []int{0, 1}}}, Shape{GPUs: 2, Hosts: 3})
	require.True(t, errors.As(err, &se))
	assert.Equal(t, "--hosts-per-trial: --hosts-per-trial 3 is more than the hosts with 2 free GPU(s) (there are 2) (fix: ask for at most 2, or fewer GPUs per host with --gpus-per-trial)", err.Error())
	assert.ErrorContains(t, CheckFits(fleet(2, 2), Shape{GPUs: 1, Hosts: 0}), "--hosts-per-trial 0 is not a number of hosts")
}

// The ledger keeps trials off GPUs other runs lease and off lost hosts:
// a conflict blocks the placement until the next look at the leases,
// which frees what it finds free and blocks what another run took; a
// lost host is out for good, and a trial too large for what is left
// no longer fits.
func TestLedgerLeasesAndLostHosts(t *testing.T) {
	l := NewLedger(fleet(2, 2))
	require.NoError(t, l.Take("t0", On("a", 0)))
	for _, step := range []struct {
		name    string
		do      func()
		free    []HostGPUs
		blocked bool
	}{
		{"start", func() {}, []HostGPUs{{"a", []int{1}}, {"b", []int{0, 1}}}, false},
		{"a conflict on a:1", func() { l.Block(On("a", 1)) }, []HostGPUs{{"a", nil}, {"b", []int{0, 1}}}, true},
		// The look finds t0's own GPU leased (by t0) and b:0 leased by another run.
		{"a look: a:1 free again, b:0 leased", func() { l.Available([]HostGPUs{{"a", []int{1}}, {"b", []int{1}}}) },
			[]HostGPUs{{"a", []int{1}}, {"b", []int{1}}}, true},
		{"t0 ends: its GPU is free without a look", func() { l.Release("t0") }, []HostGPUs{{"a", []int{0, 1}}, {"b", []int{1}}}, true},
		{"b lost", func() { l.MarkOut("b") }, []HostGPUs{{"a", []int{0, 1}}}, false},
		{"a look finds b free: still out", func() { l.Available(fleet(2, 2)) }, []HostGPUs{{"a", []int{0, 1}}}, false},
	} {
		step.do()
		assert.Equal(t, step.free, l.Free(), step.name)
		assert.Equal(t, step.blocked, l.Blocked(), step.name)
	}
	assert.True(t, l.Fits(Shape{GPUs: 2, Hosts: 1}))
	assert.False(t, l.Fits(Shape{GPUs: 2, Hosts: 2}), "b is out")
	l.MarkOut("a")
	assert.False(t, l.Fits(Shape{GPUs: 1, Hosts: 1}), "every host out")
}

func TestMissing(t *testing.T) {
	two := Placement{Hosts: []HostGPUs{{"a", []int{0}}, {"b", []int{0}}}}
	for _, tc := range []struct {
		name string
		look []HostGPUs
		want []string
	}{
		{"both answer", []HostGPUs{{"a", nil}, {"b", []int{1}}, {"c", nil}}, nil},
		{"b does not", []HostGPUs{{"a", []int{0}}, {"c", nil}}, []string{"b"}},
		{"no look", nil, []string{"a", "b"}},
	} {
		assert.Equal(t, tc.want, Missing(two, tc.look), tc.name)
	}
}

// A resumed sweep's adopted trials hold GPUs that a look at the hosts
// shows busy or leased (their own runs'): they are merged into the
// fleet, host by host, a host the look left out added.
func TestMerge(t *testing.T) {
	fleet := []HostGPUs{{"a", []int{2}}, {"b", []int{0}}}
	got := Merge(fleet, On("a", 0, 1), Placement{Hosts: []HostGPUs{{"b", []int{0, 1}}, {"c", []int{3}}}})
	assert.Equal(t, []HostGPUs{{"a", []int{0, 1, 2}}, {"b", []int{0, 1}}, {"c", []int{3}}}, got)
	assert.Equal(t, []HostGPUs{{"a", []int{2}}, {"b", []int{0}}}, fleet, "the look is not changed")
	assert.NoError(t, CheckFits(Merge(nil, On("a", 0, 1)), Shape{GPUs: 2, Hosts: 1}),
		"a look that finds every GPU held by the adopted trials still fits them")
}
