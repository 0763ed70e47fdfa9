package launcher

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
)

// TestScanLocalBadPatternIsConfigError: push reports a bad exclude pattern
// as its own *push.PatternError; the launcher makes it the job file's
// ConfigError, so the CLI exits 2 and a run does not retry it.
func TestScanLocalBadPatternIsConfigError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".droverignore"), []byte("ok\n[bad\n"), 0o644))
	_, err := scanLocal(dir, push.Options{})
	var ce *config.ConfigError
	require.True(t, errors.As(err, &ce), "bad .droverignore pattern is a config error: %T %v", err, err)
	assert.Equal(t, 2, ce.Line)
	assert.Contains(t, err.Error(), `.droverignore:2: bad pattern "[bad" (close the '[' or escape it as '\['`)

	require.NoError(t, os.Remove(filepath.Join(dir, ".droverignore")))
	_, err = scanLocal(dir, push.Options{Exclude: []string{"a", "b[", "c"}})
	require.True(t, errors.As(err, &ce), "bad job.exclude pattern is a config error: %T %v", err, err)
	assert.Equal(t, "job.exclude[1]", ce.Key)

	tree, err := scanLocal(dir, push.Options{})
	require.NoError(t, err)
	assert.NotNil(t, tree)
}

// TestPushJob: push.ForJob gets the job file's paths and excludes.
func TestPushJob(t *testing.T) {
	cfg := &config.Config{Path: "/src/job/job.toml", Job: config.Job{Code: "/src/job", Workdir: "w",
		CheckpointDir: "ck", Exclude: []string{"*.pt"}}}
	opts := push.ForJob(pushJob(cfg), "")
	assert.Equal(t, []string{"ck", "runs"}, opts.Protect)
	assert.Equal(t, []string{"*.pt"}, opts.Exclude)
}

// A file that keeps changing while pushed is worth one warning per run:
// not one per attempt (each scans it again) nor per host (each may meet
// it under its upload), and `drover push` says it once for every host.
func TestChangingFileWarnedOncePerRun(t *testing.T) {
	var buf strings.Builder
	events := &eventLog{w: &buf, now: time.Now}
	log := push.Changing{Path: "run.log", Size: 100}
	for n := 1; n <= 3; n++ {
		p := &pushPhase{phaseEnv: phaseEnv{n: n, total: 3, events: events}}
		p.warnChanging([]push.Changing{log})                                    // the scan's
		p.warnChanging([]push.Changing{log, {Path: "other.log", Skipped: "x"}}) // hosts'
	}
	out := buf.String()
	assert.Equal(t, 1, strings.Count(out, "warning: run.log"), out)
	assert.Equal(t, 1, strings.Count(out, "warning: other.log"), out)
	assert.Contains(t, out, "attempt 1/3: push: warning: run.log kept changing", out)

	hosts := []PushOutcome{{Result: push.Result{Changing: []push.Changing{log}}}, {Result: push.Result{Changing: []push.Changing{log}}}}
	assert.Equal(t, []string{log.Warning()}, changingWarnings(&push.Tree{Changing: []push.Changing{log}}, hosts))
}
