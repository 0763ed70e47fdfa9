package hostio

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/launcher/agent"
)

// drover ps shows the live runs (--all: every one kept) and forgets those
// over for longer than PsRetention; a run that may still run is kept
// whatever its age.
func TestSelectRuns(t *testing.T) {
	now := time.Date(2026, 3, 12, 12, 0, 0, 0, time.UTC)
	old := now.Add(-PsRetention - time.Hour)
	recent := now.Add(-PsRetention + time.Hour)
	row := func(id string, st agent.RunState, updated time.Time) PsRow {
		return PsRow{RunID: id, State: st, Updated: updated}
	}
	rows := []PsRow{
		row("running-old", agent.RunRunning, old),
		row("restarting", agent.RunRestarting, recent),
		row("unsupervised-old", agent.RunUnsupervised, old),
		row("succeeded-recent", agent.RunSucceeded, recent),
		row("failed-old", agent.RunFailed, old),
		row("stopped-recent", agent.RunStopped, now.Add(-time.Minute)),
		row("stopped-old", agent.RunStopped, old),
		row("lost-recent", agent.RunLost, recent),
		row("lost-old", agent.RunLost, old),
		row("starting-new", agent.RunStarting, now),
	}
	ids := func(rs []PsRow) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.RunID)
		}
		return out
	}
	for _, tc := range []struct {
		all        bool
		show, gone []string
	}{
		{all: false,
			show: []string{"starting-new", "restarting", "running-old", "unsupervised-old"},
			gone: []string{"failed-old", "stopped-old", "lost-old"}},
		{all: true,
			show: []string{"starting-new", "stopped-recent", "restarting", "succeeded-recent", "lost-recent", "running-old", "unsupervised-old"},
			gone: []string{"failed-old", "stopped-old", "lost-old"}},
	} {
		show, forget := SelectRuns(rows, now, tc.all)
		assert.Equal(t, tc.show, ids(show), "all=%v: shown, newest first", tc.all)
		assert.ElementsMatch(t, tc.gone, ids(forget), "all=%v: forgotten", tc.all)
	}
	show, forget := SelectRuns(nil, now, false)
	assert.NotNil(t, show, "an empty list prints [] with --json, not null")
	assert.Empty(t, forget)
}

// LocalRuns removes the rows it forgets from this machine's list, and a
// foreground run whose drover is gone reads as lost, a detached one as
// unsupervised, a queued one as lost (its place in the queues went with
// its supervisor).
func TestLocalRunsForgetsOldRuns(t *testing.T) {
	// Run ids in drover's own format: LocalRuns skips any other.
	const oldStopped, fgGone, bgGone, fgLive = "20260101-000000-00000a", "20260101-000000-00000b", "20260101-000000-00000c", "20260101-000000-00000d"
	const queuedGone, queuedLive = "20260101-000000-00000e", "20260101-000000-00000f"
	home := t.TempDir()
	t.Setenv("HOME", home)
	long := time.Now().Add(-PsRetention - time.Hour).UTC()
	NoteLocally("job.toml", agent.RunRecord{RunID: oldStopped, Job: "j", State: agent.RunStopped, Updated: long})
	NoteLocally("job.toml", agent.RunRecord{RunID: fgGone, Job: "j", State: agent.RunRunning, SupervisorPid: -1, Foreground: true, Updated: time.Now()})
	NoteLocally("job.toml", agent.RunRecord{RunID: bgGone, Job: "j", State: agent.RunRunning, SupervisorPid: -1, Updated: time.Now()})
	NoteLocally("job.toml", agent.RunRecord{RunID: fgLive, Job: "j", State: agent.RunRunning, SupervisorPid: os.Getpid(), Foreground: true, Updated: time.Now()})
	NoteLocally("job.toml", agent.RunRecord{RunID: queuedGone, Job: "j", State: agent.RunQueued, SupervisorPid: -1, Updated: time.Now()})
	NoteLocally("job.toml", agent.RunRecord{RunID: queuedLive, Job: "j", State: agent.RunQueued, SupervisorPid: os.Getpid(), Updated: time.Now()})

	live, err := LocalRuns(false)
	require.NoError(t, err)
	states := map[string]agent.RunState{}
	for _, r := range live {
		states[r.RunID] = r.State
	}
	assert.Equal(t, map[string]agent.RunState{fgLive: agent.RunRunning, bgGone: agent.RunUnsupervised, queuedLive: agent.RunQueued}, states)
	assert.NoFileExists(t, filepath.Join(home, localRunsDir, oldStopped+".json"), "forgotten past PsRetention")

	all, err := LocalRuns(true)
	require.NoError(t, err)
	states = map[string]agent.RunState{}
	for _, r := range all {
		states[r.RunID] = r.State
	}
	assert.Equal(t, map[string]agent.RunState{fgLive: agent.RunRunning, bgGone: agent.RunUnsupervised, fgGone: agent.RunLost,
		queuedLive: agent.RunQueued, queuedGone: agent.RunLost}, states)
	for _, r := range all {
		assert.Equal(t, r.RunID == fgLive || r.RunID == fgGone, r.Foreground, r.RunID)
	}

	MarkLocally(bgGone, agent.RunStopped)
	live, err = LocalRuns(false)
	require.NoError(t, err)
	assert.Len(t, live, 2, "stopped through its agents: no longer live")
}
