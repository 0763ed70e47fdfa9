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

[[host]]
name = "a"
address = "10.0.0.1"
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

	// What a run's watcher records: a checkpoint written on host a.
	for _, logRoot := range []string{filepath.Join(dir, "runs"), filepath.Join(dir, "elsewhere")} {
		rec, err := checkpoint.LoadRecord(checkpoint.RecordPath(logRoot, "j"), "j")
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "ck"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "ck", "step-3.pt"), make([]byte, 2048), 0o644))
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

	code, _, errOut = drover()
	assert.Equal(t, agent.ExitUsage, code)
	assert.Contains(t, errOut, "usage: drover checkpoints [--log-dir LOG_DIR] [--inventory FILE] [--accept-new-hosts] JOB.toml")
}
