package cause

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPeerLost(t *testing.T) {
	for _, tc := range []struct {
		cause string
		want  bool
	}{
		{"stderr: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.231.3.11]:22911", true},
		{"stderr: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:575] Read error [10.0.0.2]:45231: Connection reset by peer", true},
		{"RuntimeError: NCCL communicator encountered error: remote process exited or there was a network error (train.py:88)", true},
		{"torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, remote process exited or there was a network error, NCCL version 2.19.3 ncclRemoteError", true},
		{"stderr: RuntimeError: failed to recv, got 0 bytes", true},
		{"stderr: BrokenPipeError: [Errno 32] Broken pipe", true},
		{"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (train.py:212)", false},
		{"stderr: KeyError: 'lr'", false},
		{"", false},
	} {
		assert.Equal(t, tc.want, PeerLost(tc.cause), tc.cause)
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// ms is t0 plus n milliseconds: drover's clock in the tables.
func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

const peer = "stderr: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:29500"

// replay feeds steps to a Tracker of four processes, worker-0 and worker-1
// on a, worker-2 and worker-3 on b (or of procs), and returns what the
// supervisor would have done: the events, the one stop, and the summary's
// cause lines as writeCauses orders them.
type replay struct {
	events  []string
	stops   []Answer
	causes  map[int]Cause
	tracker *Tracker
}

func run(t *testing.T, procs []string, steps []func(*Tracker) Answer) replay {
	t.Helper()
	tr := New(0)
	if procs == nil {
		procs = []string{"worker-0@a", "worker-1@a", "worker-2@b", "worker-3@b"}
	}
	for _, p := range procs {
		name, host, ok := strings.Cut(p, "@")
		require.True(t, ok, p)
		tr.Add(name, host)
	}
	r := replay{causes: map[int]Cause{}, tracker: tr}
	for _, step := range steps {
		a := step(tr)
		r.events = append(r.events, a.Events...)
		for _, c := range a.Causes {
			r.causes[c.Proc] = c
		}
		if a.Stop != Continue {
			r.stops = append(r.stops, a)
		}
	}
	return r
}

// summary is the causes as the summary gives them: by drover's clock.
func (r replay) summary() []string {
	var cs []Cause
	for _, c := range r.causes {
		cs = append(cs, c)
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].At.Equal(cs[j].At) {
			return cs[i].Proc < cs[j].Proc
		}
		return cs[i].At.Before(cs[j].At)
	})
	var out []string
	for i, c := range cs {
		label := "root cause"
		if i > 0 {
			label = "then"
		}
		out = append(out, fmt.Sprintf("%s: %d: %s", label, c.Proc, c.Text))
	}
	return out
}

func exited(i, at int, status string, code int, cause string) func(*Tracker) Answer {
	return func(t *Tracker) Answer {
		return t.Exited(Exit{Proc: i, At: ms(at), Status: status, Code: code, Cause: cause})
	}
}

func finished(i, at int, met bool) func(*Tracker) Answer {
	return func(t *Tracker) Answer { return t.Finished(i, ms(at), met) }
}

func tick(at int) func(*Tracker) Answer {
	return func(t *Tracker) Answer { return t.Tick(ms(at)) }
}

func TestTracker(t *testing.T) {
	const held = "worker-3@b exited 1: " + peer
	const hold = held + "; a peer went away first: waiting up to 5s to hear which"
	for _, tc := range []struct {
		name   string
		procs  []string
		steps  []func(*Tracker) Answer
		events []string
		// stop is the answer that stopped the group (Reason, Code), if any.
		stop    Stop
		reason  string
		code    int
		summary []string
	}{
		{
			// (a) A DDP desync: the victim's lost peer arrives before the
			// exit 0 of the rank that finished; the exit 0 is the
			// attempt's first event, the victim comes after it.
			name:   "desync: the early finish explains a held lost peer",
			steps:  []func(*Tracker) Answer{exited(3, 0, "1", 1, peer), finished(1, 200, false)},
			events: []string{hold, "worker-1@a finished while 3 other(s) still run (exit 0 at 03:04:05.200)"},
			stop:   Failed, code: 1,
			reason: held + "; the attempt's first event: worker-1@a finished while 3 other(s) still run",
			summary: []string{
				"root cause: 1: worker-1@a finished while 3 other(s) still run: the attempt's first event",
				"then: 3: " + peer,
			},
		},
		{
			// (b) An OOM kill (137, no lost peer in it) after a lost
			// peer: the OOM is the root cause.
			name:   "an OOM kill after a lost peer is the root cause",
			steps:  []func(*Tracker) Answer{exited(3, 0, "1", 1, peer), exited(1, 300, "137 (SIGKILL)", 137, "")},
			events: []string{hold},
			stop:   Failed, code: 137,
			reason:  "worker-1@a exited 137 (SIGKILL)",
			summary: []string{"root cause: 1: worker-1@a exited 137 (SIGKILL)", "then: 3: " + peer},
		},
		{
			name:   "a failure of its own after a lost peer is the root cause",
			steps:  []func(*Tracker) Answer{exited(3, 0, "1", 1, peer), exited(1, 300, "1", 1, "stderr: RuntimeError: CUDA out of memory")},
			events: []string{hold},
			stop:   Failed, code: 1,
			reason:  "worker-1@a exited 1: stderr: RuntimeError: CUDA out of memory",
			summary: []string{"root cause: 1: stderr: RuntimeError: CUDA out of memory", "then: 3: " + peer},
		},
		{
			name: "a lost host after a lost peer is the root cause",
			steps: []func(*Tracker) Answer{exited(3, 0, "1", 1, peer), func(t *Tracker) Answer {
				return t.HostLost(0, ms(100), "a (10.0.0.1) lost: connection lost")
			}},
			events: []string{hold},
			stop:   HostLost, code: -1,
			reason:  "worker-0@a: a (10.0.0.1) lost: connection lost",
			summary: []string{"root cause: 0: worker-0@a: a (10.0.0.1) lost: connection lost", "then: 3: " + peer},
		},
		{
			// (c) A torchrun worker fails after another finished early:
			// the early finish is named first, as the attempt's first
			// event, and the failure is not held (the first event
			// explains it).
			name:  "torchrun: a worker's failure after an early finish names the first event",
			procs: []string{"node-0@a", "node-1@b"},
			steps: []func(*Tracker) Answer{
				func(t *Tracker) Answer {
					return t.WorkerEnded(Worker{Proc: 1, At: ms(0), Rank: 3, How: "exited 0", Running: 1})
				},
				func(t *Tracker) Answer {
					return t.WorkerEnded(Worker{Proc: 0, At: ms(1000), Rank: 0, Failed: true, How: "exited 1", Status: 1, Cause: peer})
				},
				// torchrun exits with its worker's status; the other
				// is stopped.
				exited(0, 1100, "1", 1, ""), exited(1, 1200, "143 (SIGTERM)", 143, ""),
			},
			events: []string{"rank 3 (node-1@b) finished while 1 other worker(s) on b and 1 other host(s) still run (exit 0 at 03:04:05.000)"},
			stop:   Failed, code: 1,
			reason: "rank 0 (node-0@a) exited 1: " + peer + "; the attempt's first event: rank 3 (node-1@b) finished while 1 other worker(s) on b and 1 other host(s) still run",
			summary: []string{
				"root cause: 1: rank 3 (node-1@b) finished while 1 other worker(s) on b and 1 other host(s) still run: the attempt's first event",
				"then: 0: rank 0 (node-0@a) exited 1: " + peer,
			},
		},
		{
			// (d) Nothing explains the lost peer within the hold: the
			// victim is the root cause.
			name:   "nothing after the hold: the victim is the root cause",
			steps:  []func(*Tracker) Answer{exited(3, 0, "1", 1, peer), tick(4999), tick(5000)},
			events: []string{hold},
			stop:   Failed, code: 1,
			reason:  held,
			summary: []string{"root cause: 3: " + peer},
		},
		{
			name:   "another lost peer while one is held is one more victim",
			steps:  []func(*Tracker) Answer{exited(3, 0, "1", 1, peer), exited(2, 100, "1", 1, peer), tick(5000)},
			events: []string{hold},
			stop:   Failed, code: 1,
			reason:  held,
			summary: []string{"root cause: 3: " + peer, "then: 2: " + peer},
		},
		{
			name: "the last of the group releases a held failure",
			steps: []func(*Tracker) Answer{exited(3, 0, "1", 1, peer), exited(2, 10, "1", 1, peer),
				exited(1, 20, "1", 1, peer), exited(0, 30, "1", 1, peer)},
			events: []string{hold},
			stop:   Failed, code: 1,
			reason:  held,
			summary: []string{"root cause: 3: " + peer, "then: 2: " + peer, "then: 1: " + peer, "then: 0: " + peer},
		},
		{
			name:  "a failure that is no lost peer stops the group at once",
			steps: []func(*Tracker) Answer{exited(2, 0, "1", 1, "stderr: KeyError: 'lr'"), exited(3, 100, "143 (SIGTERM)", 143, ""), exited(1, 100, "1", 1, peer), exited(0, 100, "1", 1, "")},
			stop:  Failed, code: 1,
			reason:  "worker-2@b exited 1: stderr: KeyError: 'lr'",
			summary: []string{"root cause: 2: stderr: KeyError: 'lr'", "then: 0: exited 1", "then: 1: " + peer},
		},
		{
			name:   "an early finish is named after the wait, and is the first event of a later failure",
			steps:  []func(*Tracker) Answer{finished(2, 0, false), tick(5000), exited(1, 9000, "1", 1, "stderr: KeyError: 'lr'")},
			events: []string{"worker-2@b finished while 3 other(s) still run (exit 0 at 03:04:05.000)"},
			stop:   Failed, code: 1,
			reason: "worker-1@a exited 1: stderr: KeyError: 'lr'; the attempt's first event: worker-2@b finished while 3 other(s) still run",
			summary: []string{
				"root cause: 2: worker-2@b finished while 3 other(s) still run: the attempt's first event",
				"then: 1: stderr: KeyError: 'lr'",
			},
		},
		{
			name:  "a healthy end: every exit 0 within the wait is no event",
			steps: []func(*Tracker) Answer{finished(0, 0, false), finished(1, 10, false), finished(2, 20, false), finished(3, 30, true), tick(5000)},
			stop:  Succeeded, code: -1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.procs, tc.steps)
			assert.Equal(t, tc.events, r.events)
			if tc.stop == Continue {
				assert.Empty(t, r.stops)
			} else if assert.Len(t, r.stops, 1) {
				assert.Equal(t, tc.stop, r.stops[0].Stop)
				assert.Equal(t, tc.reason, r.stops[0].Reason)
				assert.Equal(t, tc.code, r.stops[0].Code)
			}
			assert.Equal(t, tc.summary, r.summary())
		})
	}
}

// The Tracker wants a tick when an early finish is to be named and when a
// held failure's wait ends, and none otherwise.
func TestTrackerNext(t *testing.T) {
	tr := New(300 * time.Millisecond)
	for _, n := range []string{"a", "b", "c"} {
		tr.Add("worker", n)
	}
	_, ok := tr.Next()
	assert.False(t, ok)
	tr.Finished(0, ms(0), false)
	at, ok := tr.Next()
	assert.True(t, ok)
	assert.Equal(t, ms(5000), at)
	tr.Tick(ms(5000))
	_, ok = tr.Next()
	assert.False(t, ok)

	tr = New(300 * time.Millisecond)
	tr.Add("worker-0", "a")
	tr.Add("worker-1", "b")
	a := tr.Exited(Exit{Proc: 0, At: ms(0), Seen: ms(50), Status: "1", Code: 1, Cause: peer})
	assert.Equal(t, []string{"worker-0@a exited 1: " + peer + "; a peer went away first: waiting up to 300ms to hear which"}, a.Events)
	at, ok = tr.Next()
	assert.True(t, ok)
	assert.Equal(t, ms(350), at, "from when drover saw the failure")
}

// Once the group is stopping, ends are victims: drover's own stop (143,
// 137, a worker's SIGTERM) and the user's interrupt explain theirs, and a
// cause torchrun gives for its own stop is none.
func TestTrackerStopping(t *testing.T) {
	tr := New(0)
	for _, n := range []string{"a", "b", "c", "d"} {
		tr.Add("worker", n)
	}
	tr.Stopping(false)
	assert.False(t, tr.NeedsCause(0, 143))
	assert.False(t, tr.NeedsCause(0, 137))
	assert.True(t, tr.NeedsCause(0, 1))
	assert.False(t, tr.NeedsWorkerCause(Worker{Proc: 0, Failed: true, Signal: "TERM"}))
	assert.True(t, tr.NeedsWorkerCause(Worker{Proc: 0, Failed: true, Status: 1}))
	a := tr.Exited(Exit{Proc: 0, At: ms(0), Status: "1", Code: 1, Cause: "torch.distributed.elastic.multiprocessing.api.SignalException: Process 42 got signal: 15"})
	assert.Equal(t, Answer{}, a)
	a = tr.WorkerEnded(Worker{Proc: 1, At: ms(5), Rank: 2, Failed: true, How: "exited 1", Status: 1})
	assert.Equal(t, Answer{}, a, "recorded with its process's exit")
	a = tr.Exited(Exit{Proc: 1, At: ms(10), Status: "1", Code: 1})
	assert.Equal(t, []Cause{{Proc: 1, Text: "rank 2 (worker@b) exited 1", At: ms(5)}}, a.Causes)
	assert.Equal(t, Continue, a.Stop)

	tr.Stopping(true)
	assert.False(t, tr.NeedsCause(2, 1))
	assert.Equal(t, Answer{}, tr.Exited(Exit{Proc: 2, At: ms(20), Status: "1", Code: 1}))
	assert.Equal(t, Answer{}, tr.HostLost(3, ms(20), "d lost"))
}
