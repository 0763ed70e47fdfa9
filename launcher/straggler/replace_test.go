package straggler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/internal/testenv"
)

// on_straggler = "replace" replaces a named straggler only at a
// checkpoint newer than its naming that a group without its host can
// restart from (Kept), and only with a free spare; without one it says
// so once and otherwise only names the rank. A newer checkpoint that
// only the straggler's host holds (rank 0 writes there) waits for
// drover's copy, or, when drover makes none, is said once.
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    ReplaceState
		want Action
	}{
		{"let go before a checkpoint", ReplaceState{SpareFree: true, AtNaming: 1, Newest: 2}, Keep},
		{"spare free, no checkpoint yet", ReplaceState{Named: true, SpareFree: true}, Wait},
		{"spare free, only the checkpoint from before the naming", ReplaceState{Named: true, SpareFree: true, AtNaming: 3, Newest: 3}, Wait},
		{"spare free, a first checkpoint since", ReplaceState{Named: true, SpareFree: true, Newest: 1, Kept: 1}, Replace},
		{"spare free, a newer checkpoint", ReplaceState{Named: true, SpareFree: true, AtNaming: 3, Newest: 4, Kept: 4}, Replace},
		{"a newer checkpoint only on the straggler's host", ReplaceState{Named: true, SpareFree: true, AtNaming: 3, Newest: 4, Kept: 3, Copies: true}, WaitCopy},
		{"a newer checkpoint only there, the wait said", ReplaceState{Named: true, SpareFree: true, AtNaming: 3, Newest: 4, Kept: 3, Copies: true, ToldCopy: true}, Wait},
		{"a newer checkpoint only there, no copies made", ReplaceState{Named: true, SpareFree: true, AtNaming: 3, Newest: 4, Kept: 3}, NoCopy},
		{"no copies made, said already", ReplaceState{Named: true, SpareFree: true, AtNaming: 3, Newest: 5, Kept: 3, ToldCopy: true}, Wait},
		{"the copy done", ReplaceState{Named: true, SpareFree: true, AtNaming: 3, Newest: 4, Kept: 4, Copies: true, ToldCopy: true}, Replace},
		{"a newer one only there, an older one since the naming copied", ReplaceState{Named: true, SpareFree: true, AtNaming: 3, Newest: 5, Kept: 4, Copies: true}, Replace},
		{"the copy of the checkpoint from before the naming done since", ReplaceState{Named: true, SpareFree: true, AtNaming: 4, Newest: 4, Kept: 4, Copies: true}, Wait},
		{"no spare, a newer checkpoint only there", ReplaceState{Named: true, AtNaming: 3, Newest: 4, Kept: 3, Copies: true}, NoSpare},
		{"no spare", ReplaceState{Named: true, AtNaming: 3, Newest: 4}, NoSpare},
		{"no spare, said already", ReplaceState{Named: true, Told: true, AtNaming: 3, Newest: 4}, Keep},
		{"a spare freed after no spare was said", ReplaceState{Named: true, SpareFree: true, Told: true, AtNaming: 3, Newest: 4, Kept: 4}, Replace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Decide(tc.s), "%+v", tc.s)
		})
	}
}

// drover copies a checkpoint off its writer's host into the mirror, or
// onto another host of the group with checkpoint_copies of 2 or more.
func TestNoCopyWhy(t *testing.T) {
	for _, tc := range []struct {
		copies, hosts int
		mirror        bool
		want          string
	}{
		{2, 2, false, ""},
		{3, 4, false, ""},
		{1, 2, true, ""},
		{1, 1, true, ""},
		{1, 2, false, "checkpoint_copies = 1, no checkpoint_mirror; set checkpoint_copies = 2"},
		{2, 1, false, "the group's only host, no checkpoint_mirror; set checkpoint_mirror"},
	} {
		assert.Equal(t, tc.want, NoCopyWhy(tc.copies, tc.hosts, tc.mirror), "%+v", tc)
	}
}

// The message's head, which the replacement's event says otherwise, is
// left out.
func TestFindingWhat(t *testing.T) {
	f := Finding{Process: "worker-2", Host: "h2", Rank: 2,
		Message: "straggler: rank 2 (worker-2@h2) spends 12x its peers' CPU per step (0.120s against 0.010s)"}
	assert.Equal(t, "spends 12x its peers' CPU per step (0.120s against 0.010s)", f.What())
}

// Replacer waits, once told, for a checkpoint newer than the naming and
// then for it to be held off the straggler's host, forgets a straggler
// let go, and asks for one replacement only.
func TestReplacer(t *testing.T) {
	var newest, kept, replaced, copyWaits atomic.Int32
	var got, waiting atomic.Value
	r := NewReplacer(ReplaceOptions{
		Newest:    func() int { return int(newest.Load()) },
		Kept:      func(string) int { return int(kept.Load()) },
		Copies:    true,
		SpareFree: func(string) bool { return true },
		Every:     10 * time.Millisecond,
		Replace:   func(f Finding) { got.Store(f); replaced.Add(1) },
		Waiting:   func(f Finding) { waiting.Store(f) },
		WaitCopy:  func(Finding) { copyWaits.Add(1) },
		NoSpare:   func(Finding) { t.Error("a spare is free") },
		NoCopy:    func(Finding) { t.Error("drover copies") },
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan struct{})
	go func() { r.Run(ctx); close(ended) }()
	newest.Store(5)
	kept.Store(5)
	cleared := Finding{Process: "worker-1", Host: "h1", Rank: 1, Signal: CPU}
	r.Named(cleared)
	r.Cleared(cleared)
	slow := Finding{Process: "worker-2", Host: "h2", Rank: 2, Signal: CPU}
	r.Named(slow)
	testenv.WaitFor(t, 5*time.Second, "the replacement waiting", func() bool { return waiting.Load() == slow })
	assert.Zero(t, replaced.Load(), "no checkpoint since the naming")
	newest.Store(6) // only on h2, the straggler's host, so far
	testenv.WaitFor(t, 5*time.Second, "the wait for the copy to be said", func() bool { return copyWaits.Load() > 0 })
	assert.Zero(t, replaced.Load(), "checkpoint 6 is held only on the straggler's host")
	kept.Store(6)
	testenv.WaitFor(t, 5*time.Second, "Run to end after asking", func() bool {
		select {
		case <-ended:
			return true
		default:
			return false
		}
	})
	assert.Equal(t, int32(1), replaced.Load())
	assert.Equal(t, int32(1), copyWaits.Load(), "said once")
	assert.Equal(t, slow, got.Load())
	r.Named(slow) // after Run: goes nowhere, does not block
}
