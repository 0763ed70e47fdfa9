package launcher

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/gpulease"
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
