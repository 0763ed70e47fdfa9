package launcher

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/notify"
)

// The run's events reach its notifications stamped, with a host's control
// characters escaped as on the terminal; started is told once per run
// (later attempts are told as restarted); without a sink nothing is sent.
func TestEventLogNotify(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var got []notify.Event
	e := &eventLog{w: &bytes.Buffer{}, now: func() time.Time { return at }}
	e.notify(notify.Event{Kind: notify.Started}) // no sink yet: dropped, and not counted as told
	e.sink = func(ev notify.Event) { got = append(got, ev) }
	e.notify(notify.Event{Kind: notify.Started, Attempt: 1, Message: "started 2 process(es)"})
	e.notify(notify.Event{Kind: notify.Started, Attempt: 2, Message: "started 2 process(es)"})
	e.notify(notify.Event{Kind: notify.Hang, Attempt: 2, Message: "hung: \x1b[2Jlast line"})
	require.Len(t, got, 2)
	assert.Equal(t, notify.Started, got[0].Kind)
	assert.Equal(t, 1, got[0].Attempt)
	assert.Equal(t, at, got[0].Time)
	assert.Equal(t, `hung: \x1b[2Jlast line`, got[1].Message)
}

// The end of a run is told once, with its kind, the attempt and, for a
// failure, the root cause's process as the summary names it.
func TestFinishNotifies(t *testing.T) {
	r := newRunner(RunOptions{})
	r.runRec.Job = "mnist"
	var got []notify.Event
	r.events.sink = func(ev notify.Event) { got = append(got, ev) }
	r.table.procs["worker-1"] = &ProcSummary{Name: "worker-1", Host: "b", Rank: 1, Cause: "exit 3", CauseAt: time.Unix(2, 0)}
	r.table.procs["worker-0"] = &ProcSummary{Name: "worker-0", Host: "a", Rank: 0, Cause: "SIGTERM", CauseAt: time.Unix(3, 0)}
	r.table.order = []string{"worker-0", "worker-1"}
	for _, tc := range []struct {
		o    Outcome
		err  error
		kind notify.Kind
		msg  string
	}{
		{Failed, errors.New("no restarts left (max_restarts = 1)"), notify.Failed, "job mnist failed: no restarts left (max_restarts = 1)"},
		{Succeeded, nil, notify.Finished, "job mnist succeeded after 2 attempt(s)"},
		{Interrupted, errors.New("drover stop"), notify.Stopped, "job mnist stopped in attempt 2: drover stop"},
	} {
		got = nil
		r.finish(&Result{Attempts: 2}, tc.o, tc.err)
		require.Len(t, got, 1)
		assert.Equal(t, tc.kind, got[0].Kind)
		assert.Equal(t, tc.msg, got[0].Message)
		assert.Equal(t, 2, got[0].Attempt)
		if tc.kind == notify.Failed {
			assert.Equal(t, "worker-1 on b: exit 3", got[0].RootCause)
			assert.Equal(t, "b", got[0].Host)
			assert.True(t, got[0].HasRank)
			assert.Equal(t, 1, got[0].Rank)
		} else {
			assert.Empty(t, got[0].RootCause)
		}
	}
}
