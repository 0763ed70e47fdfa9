package push

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// safetyTests are the scenarios of what a push must never touch (issue
// 21), run like coreTests on every kind of FS.
var safetyTests = []struct {
	name string
	fn   func(e *env)
}{
	{"CheckpointsNeverPushedOrDeleted", testCheckpointsProtected},
	{"ExcludedLaterLeftAlone", testExcludedLaterLeftAlone},
}

func TestSafetyOSFS(t *testing.T) {
	for _, tc := range safetyTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(&env{t: t, local: t.TempDir(), fs: cluster.NewOSFS(t.TempDir()), dir: "jobs/work"})
		})
	}
}

// testCheckpointsProtected is issue 21's second item: code = "." with
// checkpoint_dir = "checkpoints" inside it. A local smoke test's
// checkpoint must not replace the fleet's, and deleting it locally must
// not delete the fleet's, even when an older drover pushed it once.
func testCheckpointsProtected(e *env) {
	t := e.t
	writeFiles(t, e.local, map[string]string{
		"train.py":                      "train",
		"checkpoints/step-1/model.pt":   "laptop step 1",
		"runs/job-20260101/events.log":  "local run log",
		".drover/logs/attempt-1/w0.log": "a local .drover",
	})
	// Pushed once by a drover that did not protect them: the hosts list
	// them in their manifest.
	e.push(nil, Options{})
	// The fleet trains on: its own step 1, and a step 2.
	e.writeRemote("checkpoints/step-1/model.pt", "fleet step 1")
	e.writeRemote("checkpoints/step-2/model.pt", "fleet step 2")
	e.writeRemote(".drover/logs/attempt-1/w0.log", "the host's log")

	protect := Options{Protect: []string{"checkpoints", "runs"}}
	writeFiles(t, e.local, map[string]string{
		"checkpoints/step-1/model.pt":  "laptop step 1, again",
		"checkpoints/step-3/model.pt":  "laptop step 3",
		"runs/job-20260101/events.log": "more local log",
		"train.py":                     "train v2",
	})
	res := e.push(nil, protect)
	assert.Equal(t, 1, res.FilesSent, "only train.py")
	require.NoError(t, os.RemoveAll(filepath.Join(e.local, "checkpoints")))
	require.NoError(t, os.RemoveAll(filepath.Join(e.local, "runs")))
	res = e.push(nil, protect)
	assert.Equal(t, 0, res.FilesDeleted)

	remote := e.remote()
	assert.Equal(t, "fleet step 1", remote["checkpoints/step-1/model.pt"].Content)
	assert.Equal(t, "fleet step 2", remote["checkpoints/step-2/model.pt"].Content)
	assert.NotContains(t, remote, "checkpoints/step-3/model.pt")
	assert.Equal(t, "local run log", remote["runs/job-20260101/events.log"].Content, "left as it was")
	log, err := e.readRemote(".drover/logs/attempt-1/w0.log")
	require.NoError(t, err)
	assert.Equal(t, "the host's log", log)
	assert.Equal(t, "train v2", remote["train.py"].Content)

	// '!' in job.exclude cannot bring a protected path back.
	writeFiles(t, e.local, map[string]string{"checkpoints/step-9/model.pt": "laptop"})
	res = e.push(nil, Options{Protect: protect.Protect, Exclude: []string{"!checkpoints/"}})
	assert.Equal(t, 0, res.FilesSent)
}

// testExcludedLaterLeftAlone is issue 21's seventh item: excluding data/
// after it was pushed leaves data/ on the hosts, as rsync does without
// --delete-excluded; the rest of the tree still syncs.
func testExcludedLaterLeftAlone(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	require.NoError(t, os.Remove(filepath.Join(e.local, "train.py")))
	writeFiles(t, e.local, map[string]string{"data/labels.csv": "changed locally", "lib/model.py": "v2"})

	res := e.push(nil, Options{Exclude: []string{"data/", "*.sh"}})
	assert.Equal(t, 1, res.FilesDeleted, "train.py only")
	assert.Equal(t, 1, res.FilesSent, "lib/model.py only")
	remote := e.remote()
	assert.Equal(t, v1["data/labels.csv"], remote["data/labels.csv"].Content, "excluded: neither deleted nor sent")
	assert.Equal(t, v1["scripts/run.sh"], remote["scripts/run.sh"].Content)
	assert.NotContains(t, remote, "train.py")

	// No longer excluded: pushed again.
	res = e.push(nil, Options{})
	assert.Equal(t, 2, res.FilesSent, "data/labels.csv and scripts/run.sh (no longer in the manifest)")
	assert.Equal(t, "changed locally", e.remote()["data/labels.csv"].Content)
}
