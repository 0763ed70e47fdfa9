package cause

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdStart turns the start hold on for failures before ms(until), each
// held up to 3s.
func holdStart(until int) func(*Tracker) Answer {
	return func(t *Tracker) Answer {
		t.HoldStartFailures(ms(until), 3*time.Second)
		return Answer{}
	}
}

func TestTrackerStartHold(t *testing.T) {
	const noFile = "stderr: python3: can't open file 'trainn.py': [Errno 2] No such file or directory"
	const first = "worker-2@b exited 2: " + noFile
	const hold = first + "; a failure at start: the others get 3s to end on their own before the group stops"
	for _, tc := range []struct {
		name    string
		steps   []func(*Tracker) Answer
		events  []string
		stop    Stop
		reason  string
		code    int
		summary []string
	}{
		{
			name: "every rank fails at start: the group stops at the last end, the first is the cause",
			steps: []func(*Tracker) Answer{holdStart(60000), exited(2, 100, "2", 2, noFile), exited(0, 150, "2", 2, noFile),
				exited(3, 180, "2", 2, noFile), exited(1, 400, "2", 2, noFile)},
			events: []string{hold}, stop: Failed, code: 2, reason: first,
			summary: []string{"root cause: 2: " + noFile, "then: 0: " + noFile, "then: 3: " + noFile, "then: 1: " + noFile},
		},
		{
			name:   "one rank fails at start, the others run on: the group stops after the settle time",
			steps:  []func(*Tracker) Answer{holdStart(60000), exited(2, 100, "2", 2, noFile), tick(3099), tick(3100)},
			events: []string{hold}, stop: Failed, code: 2, reason: first,
			summary: []string{"root cause: 2: " + noFile},
		},
		{
			name: "a signal during the hold stops the group for the failure at start",
			steps: []func(*Tracker) Answer{holdStart(60000), exited(2, 100, "2", 2, noFile),
				exited(1, 200, "137 (SIGKILL)", 137, "")},
			events: []string{hold}, stop: Failed, code: 2, reason: first,
			summary: []string{"root cause: 2: " + noFile, "then: 1: worker-1@a exited 137 (SIGKILL)"},
		},
		{
			name:   "an exit 0 during the hold explains nothing: the hold goes on",
			steps:  []func(*Tracker) Answer{holdStart(60000), exited(2, 100, "2", 2, noFile), finished(0, 200, false), tick(3100)},
			events: []string{hold}, stop: Failed, code: 2, reason: first,
			summary: []string{"root cause: 2: " + noFile},
		},
		{
			name:  "after the window a failure stops the group at once",
			steps: []func(*Tracker) Answer{holdStart(50), exited(2, 100, "2", 2, noFile)},
			stop:  Failed, code: 2, reason: first,
			summary: []string{"root cause: 2: " + noFile},
		},
		{
			name:  "a signal at start is not held",
			steps: []func(*Tracker) Answer{holdStart(60000), exited(2, 100, "137 (SIGKILL)", 137, "")},
			stop:  Failed, code: 137, reason: "worker-2@b exited 137 (SIGKILL)",
		},
		{
			name:  "without the hold a failure at start stops the group at once",
			steps: []func(*Tracker) Answer{exited(2, 100, "2", 2, noFile)},
			stop:  Failed, code: 2, reason: first,
			summary: []string{"root cause: 2: " + noFile},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, nil, tc.steps)
			assert.Equal(t, tc.events, r.events)
			require.Len(t, r.stops, 1)
			assert.Equal(t, tc.stop, r.stops[0].Stop)
			assert.Equal(t, tc.code, r.stops[0].Code)
			assert.Equal(t, tc.reason, r.stops[0].Reason)
			assert.Equal(t, tc.summary, r.summary())
		})
	}
}
