//go:build linux

package longrun

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/internal/e2e/kit"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/runview"
)

// A run adopted from another machine (here: another --log-dir, with no
// record of the run) goes on with the same checkpoint record: the entries
// the first supervisor recorded keep their sequence numbers, names and
// digests, taken from the copy the supervisor keeps on the hosts.
func TestRunDetachedAdoptElsewhereKeepsCheckpointRecord(t *testing.T) {
	fleettest.Need(t, fleet)
	j := kit.NewFleetJob(t, kit.JobSpec{Script: kit.CheckpointingScript, Hosts: 2, Job: "max_restarts = 3\ncheckpoint_dir = \"ckpt\"\ncheckpoint_copies = 2"})
	sup := kit.StartDetachedRun(t, j)
	st := kit.WaitStatus(t, j, 30*time.Second, "running", func(st runview.RunStatus) bool { return kit.Running(st) == 2 })
	shared := path.Join(kit.HostHome, j.Workdir, agent.RunDir(st.RunID), "checkpoints.json")
	local := checkpoint.RecordPath(j.LogRoot, j.Name)
	// Two checkpoints recorded here and the same record on the host.
	var before []checkpoint.Entry
	testenv.WaitFor(t, 60*time.Second, "the hosts to have this machine's record of 2 checkpoints", func() bool {
		rec, err := checkpoint.LoadRecord(local, j.Name)
		require.NoError(t, err)
		mine := rec.Entries()
		onHost, err := fleet.Exec(0, "cat", shared)
		var theirs struct {
			Entries []checkpoint.Entry `json:"checkpoints"`
		}
		if err == nil && json.Unmarshal(onHost, &theirs) == nil && len(mine) >= 2 && len(theirs.Entries) >= 2 {
			before = theirs.Entries
			return true
		}
		return false
	})
	require.NoError(t, syscall.Kill(sup, syscall.SIGKILL))

	elsewhere := t.TempDir()
	d := kit.StartDroverWrapped(t, j, []string{kit.Setsid(t)}, "run", "-d", j.Path, "--log-dir", elsewhere)
	require.Equal(t, 0, d.Wait(t, 60*time.Second), "stderr:\n%s", d.Stderr.String())
	if m := regexp.MustCompile(`supervisor: pid (\d+)`).FindStringSubmatch(d.Stdout.String()); m != nil {
		sup2, _ := strconv.Atoi(m[1])
		testenv.SignalAtCleanup(t, sup2, syscall.SIGKILL, false)
	}
	st2 := kit.WaitStatus(t, j, 30*time.Second, "a live supervisor", func(st runview.RunStatus) bool { return st.Supervisor.Alive })
	assert.Equal(t, st.RunID, st2.RunID)
	assert.Equal(t, 1, st2.Attempt, "adopted, not restarted")

	rec, err := checkpoint.LoadRecord(checkpoint.RecordPath(elsewhere, j.Name), j.Name)
	require.NoError(t, err)
	after := map[int]checkpoint.Entry{}
	for _, e := range rec.Entries() {
		after[e.Seq] = e
	}
	for _, e := range before {
		got, ok := after[e.Seq]
		if assert.True(t, ok, "checkpoint %d (%s) lost in the adoption; now: %+v", e.Seq, e.Name, rec.Entries()) {
			assert.Equal(t, e.Name, got.Name, "seq %d", e.Seq)
			assert.Equal(t, e.Digest, got.Digest, "seq %d", e.Seq)
		}
	}
	events, _ := filepath.Glob(filepath.Join(elsewhere, "*", "events.log"))
	require.Len(t, events, 1)
	b, err := os.ReadFile(events[0])
	require.NoError(t, err)
	assert.Regexp(t, `took run `+st.RunID+`'s checkpoint record from \S+ \(newest: step-\d+\)`, string(b))
}
