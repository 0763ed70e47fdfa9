package launcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/hostio"
)

// TestNoteQueue: a run is queued while it waits on any host, with one
// line per host that waits; once no host is waited on it is starting.
func TestNoteQueue(t *testing.T) {
	type note struct{ host, line string }
	for _, tc := range []struct {
		name      string
		notes     []note
		wantState agent.RunState
		wantQueue map[string]string
	}{
		{"waits on one host", []note{{"h0", "place 1 of 2"}}, agent.RunQueued, map[string]string{"h0": "place 1 of 2"}},
		{"a newer line replaces the host's", []note{{"h0", "place 2 of 2"}, {"h0", "place 1 of 1"}}, agent.RunQueued, map[string]string{"h0": "place 1 of 1"}},
		{"one host served, another waits", []note{{"h0", "a"}, {"h1", "b"}, {"h0", ""}}, agent.RunQueued, map[string]string{"h1": "b"}},
		{"every host served", []note{{"h0", "a"}, {"h1", "b"}, {"h1", ""}, {"h0", ""}}, agent.RunStarting, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := agent.RunRecord{State: agent.RunStarting}
			for _, n := range tc.notes {
				noteQueue(&rec, 2, n.host, n.line)
			}
			assert.Equal(t, tc.wantState, rec.State)
			assert.Equal(t, tc.wantQueue, rec.Queue)
			assert.Equal(t, 2, rec.Attempt)
		})
	}
}

// TestKeepsConns: a setup that failed on leased GPUs (a queue timeout)
// or was stopped keeps the connections, over which the queued run's
// record says how it ended; any other failure dials again.
func TestKeepsConns(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&QueueTimeoutError{Waited: time.Second}, true},
		{fmt.Errorf("lease GPUs on h0: %w", &gpulease.BusyError{Host: "h0"}), true},
		{fmt.Errorf("lease GPUs on h0: %w", context.Canceled), true},
		{errors.New("push to h0: connection reset"), false},
		{context.DeadlineExceeded, false},
	} {
		assert.Equal(t, tc.want, keepsConns(tc.err), "%v", tc.err)
	}
}

// queueSession stands in for a host's gpu-lease session (hostio.HoldGPUs):
// it says line once told to (answer), then waits until its wait ends.
type queueSession struct {
	line   string
	answer chan struct{}
}

func (s queueSession) hold(ctx context.Context, say func(string)) (*hostio.GPUHold, error) {
	select {
	case <-s.answer:
		say(s.line)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestQueueClockNamesHolders: --queue-timeout runs from the first host's
// answer that the attempt waits, not from the attempt's start (a loaded
// host's agent may take longer than the timeout to start); a host that
// answers only once it has passed still says, in the timeout's error,
// who holds the GPUs it waited for; and a line said after the wait is
// over is not noted (it would record the ended run queued again).
func TestQueueClockNamesHolders(t *testing.T) {
	q := newQueueClock(20 * time.Millisecond)
	defer q.stop()
	h0 := queueSession{line: "waiting for GPUs on h0 (--queue): place 1 of 1; GPU 0 leased by a", answer: make(chan struct{})}
	h1 := queueSession{line: "waiting for GPUs on h1 (--queue): place 1 of 1; GPU 0 leased by b", answer: make(chan struct{})}
	var mu sync.Mutex
	var noted []string
	note := func(line string) { mu.Lock(); noted = append(noted, line); mu.Unlock() }
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, s := range []queueSession{h0, h1} {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = q.hold(context.Background(), s.hold, note) }()
	}
	// Both hosts are slow to start: the timeout must not pass before one
	// of them said the attempt waits.
	start := time.Now()
	testenv.WaitFor(t, 10*time.Second, "the timeout's length twice over", func() bool { return time.Since(start) > 2*q.timeout })
	assert.NoError(t, q.ctx.Err(), "the clock ran before any host said the attempt waits")
	close(h0.answer)
	testenv.WaitFor(t, 10*time.Second, "the timeout passed", func() bool { return q.ctx.Err() != nil })
	close(h1.answer) // h1 answers only after the timeout passed
	wg.Wait()
	for i, s := range []queueSession{h0, h1} {
		var qt *QueueTimeoutError
		if assert.ErrorAs(t, errs[i], &qt, "host %d", i) {
			assert.Equal(t, s.line, qt.Last, "host %d's error names the holders", i)
			assert.Equal(t, "waited --queue-timeout 20ms for the GPUs; "+s.line, qt.Error())
		}
	}
	assert.ElementsMatch(t, []string{h0.line, h1.line}, noted)
}

// TestQueueClockLateLine: a line the session says after its wait is over
// (its reader goes on until the session is released) is not noted: it
// would print a wait that is over, and record the ended run queued again.
func TestQueueClockLateLine(t *testing.T) {
	q := newQueueClock(time.Millisecond)
	defer q.stop()
	late := make(chan func(string), 1)
	var noted []string
	_, err := q.hold(context.Background(), func(ctx context.Context, say func(string)) (*hostio.GPUHold, error) {
		say("waiting on h0")
		<-ctx.Done()
		late <- say
		return nil, ctx.Err()
	}, func(line string) { noted = append(noted, line) })
	var qt *QueueTimeoutError
	assert.ErrorAs(t, err, &qt)
	(<-late)("waiting on h0: place 2 of 2")
	assert.Equal(t, []string{"waiting on h0"}, noted)
}

// TestEndRecord: the record of a run that never ran says why it ended
// (its reason): stopped while queued, or after waiting --queue-timeout
// even where its record said no wait (a host's line not noted yet); a
// run that ran says nothing more than its state.
func TestEndRecord(t *testing.T) {
	qt := fmt.Errorf("lease GPUs: %w", &QueueTimeoutError{Waited: 2 * time.Second, Last: "waiting for GPUs on h0"})
	for _, tc := range []struct {
		name       string
		state      agent.RunState
		res        Result
		want       agent.RunState
		wantReason string
	}{
		{"stopped while queued", agent.RunQueued, Result{Outcome: Interrupted, Err: errors.New("stopped by drover stop")}, agent.RunStopped, "stopped by drover stop"},
		{"timeout while queued", agent.RunQueued, Result{Outcome: Failed, Err: qt}, agent.RunFailed, qt.Error()},
		{"timeout, no wait recorded", agent.RunStarting, Result{Outcome: Failed, Err: qt}, agent.RunFailed, qt.Error()},
		{"a run that ran fails", agent.RunRunning, Result{Outcome: Failed, Err: errors.New("exit 1")}, agent.RunFailed, ""},
		{"a run that ran succeeds", agent.RunRunning, Result{Outcome: Succeeded}, agent.RunSucceeded, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := agent.RunRecord{State: tc.state}
			endRecord(&rec, &tc.res)
			assert.Equal(t, tc.want, rec.State)
			assert.Equal(t, tc.wantReason, rec.Reason)
		})
	}
}
