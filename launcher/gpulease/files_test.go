package gpulease

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/testenv"
)

func sharedDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "gpus")
	require.NoError(t, Prepare(dir))
	fi, err := os.Lstat(dir)
	require.NoError(t, err)
	assert.Equal(t, fs.ModeDir|fs.ModeSticky|0o777, fi.Mode())
	return dir
}

var two = []Candidate{{0, "GPU-0"}, {1, "GPU-1"}}

// TestTakeExclusive: two takes of one GPU each get different GPUs; a
// third finds none and names both holders; a release frees one.
func TestTakeExclusive(t *testing.T) {
	dir := sharedDir(t)
	a, err := Take(dir, two, 1, 0, Holder{Job: "a", RunID: "ra"})
	require.NoError(t, err)
	b, err := Take(dir, two, 1, 0, Holder{Job: "b", RunID: "rb"})
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{0, 1}, append(append([]int{}, a.GPUs...), b.GPUs...))
	_, err = Take(dir, two, 1, 0, Holder{Job: "c", RunID: "rc"})
	var be *BusyError
	require.True(t, errors.As(err, &be), "err %v", err)
	assert.Len(t, be.Holders, 2)
	a.Release()
	c, err := Take(dir, two, 1, 0, Holder{Job: "c", RunID: "rc"})
	require.NoError(t, err)
	assert.Equal(t, a.GPUs, c.GPUs)
	c.Release()
	b.Release()
	live, err := List(dir)
	require.NoError(t, err)
	assert.Empty(t, live)
}

// TestDeadHolderReclaimed: a lease whose holder was SIGKILLed is free
// for the next take (the kernel dropped its lock).
func TestDeadHolderReclaimed(t *testing.T) {
	if os.Getenv("GPULEASE_HOLD") != "" {
		dir := os.Getenv("GPULEASE_HOLD")
		o := HoldOptions{Dir: dir, Candidates: two, N: 2, Me: Holder{Job: "killed", RunID: "rk"}}
		Hold(context.Background(), o, blockForever{}, os.Stdout)
		return
	}
	dir := sharedDir(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDeadHolderReclaimed$")
	cmd.Env = append(os.Environ(), "GPULEASE_HOLD="+dir)
	require.NoError(t, cmd.Start())
	testenv.WaitFor(t, 10*time.Second, "the holder takes both GPUs", func() bool {
		live, _ := List(dir)
		return len(live) == 2
	})
	_, err := Take(dir, two, 1, 0, Holder{Job: "next", RunID: "rn"})
	require.Error(t, err, "a live holder keeps its GPUs")
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	l, err := Take(dir, two, 2, 0, Holder{Job: "next", RunID: "rn"})
	require.NoError(t, err, "the SIGKILLed holder's leases are reclaimed")
	assert.Equal(t, []int{0, 1}, l.GPUs)
	l.Release()
}

type blockForever struct{}

func (blockForever) Read([]byte) (int, error) { select {} }

// TestPlantedLinkNotFollowed: a symbolic link planted under a lease's
// name is not followed nor replaced, and the directory itself must not
// be a link.
func TestPlantedLinkNotFollowed(t *testing.T) {
	dir := sharedDir(t)
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o644))
	require.NoError(t, os.Symlink(victim, filepath.Join(dir, leaseName("GPU-0", os.Getuid()))))
	l, err := Take(dir, two, 1, 0, Holder{Job: "a", RunID: "ra"})
	require.NoError(t, err)
	assert.Equal(t, []int{1}, l.GPUs, "the GPU whose name is taken by a link is not leased")
	l.Release()
	data, _ := os.ReadFile(victim)
	assert.Equal(t, "keep", string(data))

	link := filepath.Join(t.TempDir(), "linkdir")
	require.NoError(t, os.Symlink(dir, link))
	assert.ErrorContains(t, Prepare(link), "symbolic link")
}

// TestQueueFirstComeFirstServed: two runs wait for a leased GPU; when it
// is given back, the one that asked first (by its controller's clock, not
// by when its entry appeared) gets it, the other waits on in first place;
// a waiter whose session ends leaves the queue.
func TestQueueFirstComeFirstServed(t *testing.T) {
	dir := sharedDir(t)
	one := []Candidate{{0, "GPU-0"}}
	h, err := Take(dir, one, 1, 0, Holder{Job: "h", RunID: "rh"})
	require.NoError(t, err)
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	type waiter struct {
		events chan Event
		stop   func()
	}
	wait := func(id string, since time.Time) waiter {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		w := waiter{events: make(chan Event, 64), stop: func() { inW.Close() }}
		o := HoldOptions{Dir: dir, Candidates: one, N: 1, Queue: true, Poll: 20 * time.Millisecond,
			Me: Holder{Job: id, RunID: id, Since: since}}
		go func() { Hold(context.Background(), o, inR, outW); outW.Close() }()
		go ReadEvents(outR, func(ev Event) bool { w.events <- ev; return true })
		t.Cleanup(w.stop)
		return w
	}
	next := func(w waiter, state string) Event {
		for {
			select {
			case ev := <-w.events:
				if ev.State == state {
					return ev
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %q event", state)
			}
		}
	}
	late := wait("late", t0.Add(time.Second))
	assert.Equal(t, 1, next(late, "waiting").Position)
	early := wait("early", t0)
	ev := next(early, "waiting")
	assert.Equal(t, [2]int{1, 2}, [2]int{ev.Position, ev.Waiters})
	assert.Equal(t, "rh", ev.Holders[0].RunID, "the waiter is told who holds the GPU")
	assert.Equal(t, 2, next(late, "waiting").Position, "an earlier run goes ahead")
	h.Release()
	assert.Equal(t, []int{0}, next(early, "held").GPUs)
	for ev = next(late, "waiting"); ev.Position != 1; ev = next(late, "waiting") {
		// (it may say first that the GPU is free for a moment)
	}
	assert.Equal(t, "early", ev.Holders[0].RunID)
	early.stop()
	assert.Equal(t, []int{0}, next(late, "held").GPUs)
	late.stop()
	testenv.WaitFor(t, 10*time.Second, "the queue and the leases empty", func() bool {
		ws, _ := Waiters(dir)
		live, _ := List(dir)
		return len(ws) == 0 && len(live) == 0
	})
}

// TestRestartKeepsItsGPUs: a run's next attempt with --queue takes the
// GPU its last attempt still holds, though another run waits for it in
// the queue (ahead by its clock); once the last attempt's lease is given
// back the GPU stays the run's, and the waiter gets it when the run ends.
func TestRestartKeepsItsGPUs(t *testing.T) {
	dir := sharedDir(t)
	one := []Candidate{{0, "GPU-0"}}
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	me := Holder{Job: "r", RunID: "rr", Since: t0}
	last, err := Take(dir, one, 1, 0, me)
	require.NoError(t, err)
	hold := func(h Holder) (<-chan Event, func()) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		events := make(chan Event, 64)
		o := HoldOptions{Dir: dir, Candidates: one, N: 1, Queue: true, Poll: 20 * time.Millisecond, Me: h}
		go func() { Hold(context.Background(), o, inR, outW); outW.Close() }()
		go ReadEvents(outR, func(ev Event) bool { events <- ev; return true })
		t.Cleanup(func() { inW.Close() })
		return events, func() { inW.Close() }
	}
	next := func(events <-chan Event, state string) Event {
		for {
			select {
			case ev := <-events:
				if ev.State == state {
					return ev
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no %q event", state)
			}
		}
	}
	waiter, _ := hold(Holder{Job: "w", RunID: "rw", Since: t0.Add(time.Second)})
	assert.Equal(t, 1, next(waiter, "waiting").Position)
	me.Since = t0.Add(2 * time.Second) // the restart's attempt asks after the waiter
	again, end := hold(me)
	assert.Equal(t, []int{0}, next(again, "held").GPUs, "the restart takes its GPU back")
	last.Release()
	live, err := List(dir)
	require.NoError(t, err)
	require.Len(t, live, 1)
	assert.Equal(t, "rr", live["GPU-0"].RunID, "the GPU stays the run's")
	end()
	assert.Equal(t, []int{0}, next(waiter, "held").GPUs)
}

// TestJoinKeepsLeaseAlive: a lease joined by a group's agent outlives
// the gpu-lease agent that took it (a detached group whose supervisor is
// gone), and dies with the last holder; the same run takes it back.
func TestJoinKeepsLeaseAlive(t *testing.T) {
	dir := sharedDir(t)
	me := Holder{Job: "a", RunID: "ra"}
	l, err := Take(dir, two[:1], 1, 0, me)
	require.NoError(t, err)
	f, err := Join(l.Files()[0])
	require.NoError(t, err)
	l.Release()
	_, err = Take(dir, two[:1], 1, 0, Holder{Job: "b", RunID: "rb"})
	require.Error(t, err, "the group still holds the GPU")
	again, err := Take(dir, two[:1], 1, 0, me)
	require.NoError(t, err, "the same run adopts its lease")
	again.Release()
	f.Close()
	l2, err := Take(dir, two[:1], 1, 0, Holder{Job: "b", RunID: "rb"})
	require.NoError(t, err, "the last holder gone, the lease is free")
	l2.Release()
	_, err = Join(filepath.Join(dir, "gone.lease"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}
