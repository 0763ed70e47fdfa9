package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/checkpoint"
)

// TestCheckpointsCommand lists what drover run recorded, from the job file
// alone (runs/ next to it) or from --log-dir.
func TestCheckpointsCommand(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(`
[job]
name = "j"
framework = "pytorch"
command = ["python3", "train.py"]
code = "."
checkpoint_dir = "ck"

[[host]]
name = "a"
transport = "local"
workdir = "`+dir+`"
gpus = []
`), 0o644))
	drover := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"drover", "checkpoints"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errOut := drover(job)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "no checkpoints recorded yet")

	// What a run's watcher records: a checkpoint written on host a (one
	// version of it: the listing asks the host, and a rewrite is another).
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "ck"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ck", "step-3.pt"), make([]byte, 2048), 0o644))
	for _, logRoot := range []string{filepath.Join(dir, "runs"), filepath.Join(dir, "elsewhere")} {
		rec, err := checkpoint.LoadRecord(checkpoint.RecordPath(logRoot, "j"), "j")
		require.NoError(t, err)
		found, err := checkpoint.Scan(t.Context(), cluster.NewOSFS(dir), "a", filepath.Join(dir, "ck"), "")
		require.NoError(t, err)
		_, err = rec.Saw(found, time.Now())
		require.NoError(t, err)
	}
	code, out, errOut = drover(job)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^1 +step-3\.pt +2\.0 KiB +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +a \(written\)$`, out)

	code, out, errOut = drover("--log-dir", filepath.Join(dir, "elsewhere"), job)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "step-3.pt")

	// The script deletes it (keep N): the listing asks the host, and
	// claims it no more; --all still lists it, held nowhere; --offline
	// shows what drover last saw, as the record has it.
	require.NoError(t, os.Remove(filepath.Join(dir, "ck", "step-3.pt")))
	code, out, errOut = drover(job)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "no restorable checkpoint: the 1 recorded are held nowhere any more (--all lists them)\n", out)
	code, out, errOut = drover("--all", job)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^1 +step-3\.pt +2\.0 KiB +\S+ \S+ +nowhere any more$`, out)
	code, out, errOut = drover("--offline", job)
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^1 +step-3\.pt .* a \(written\)$`, out)

	code, _, errOut = drover()
	assert.Equal(t, agent.ExitUsage, code)
	assert.Contains(t, errOut, "usage: drover checkpoints [--log-dir LOG_DIR] [--all] [--offline] [--inventory FILE] [--accept-new-hosts] JOB.toml")
}
