package slurm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFirstRestart: after a requeue the count continues from the last one
// drover used, and never falls below SLURM_RESTART_COUNT.
func TestFirstRestart(t *testing.T) {
	for _, tc := range []struct {
		name           string
		last           int
		known          bool
		requeues, want int
	}{
		{"first run of the job", 0, false, 0, 0},
		{"requeued, state lost", 0, false, 2, 2},
		{"requeued after restarts 0,1,2", 2, true, 1, 3},
		{"requeued after no restart", 0, true, 1, 1},
		{"requeued twice, second run made no restart", 3, true, 2, 4},
		{"state older than the requeues (another workdir before)", 0, true, 5, 5},
		{"run again in the same allocation", 4, true, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, FirstRestart(tc.last, tc.known, tc.requeues))
		})
	}
}

func TestRestartState(t *testing.T) {
	wd := t.TempDir()
	_, known, err := LoadRestart(wd, "42")
	require.NoError(t, err)
	assert.False(t, known, "nothing saved yet")

	require.NoError(t, SaveRestart(wd, "42", 2))
	require.NoError(t, SaveRestart(wd, "42", 3))
	require.NoError(t, SaveRestart(wd, "43", 7))
	last, known, err := LoadRestart(wd, "42")
	require.NoError(t, err)
	assert.True(t, known)
	assert.Equal(t, 3, last)
	entries, err := os.ReadDir(filepath.Join(wd, restartDir))
	require.NoError(t, err)
	assert.Len(t, entries, 2, "one file per job, no temporary left")

	require.NoError(t, os.WriteFile(filepath.Join(wd, restartDir, "44.restart"), []byte("x\n"), 0o644))
	_, _, err = LoadRestart(wd, "44")
	assert.ErrorContains(t, err, "not a count")
	_, _, err = LoadRestart(wd, "../44")
	assert.Error(t, err, "a job id is not a path")
}
