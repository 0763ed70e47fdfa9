package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The straggler keys load with their defaults (on: 3x CPU per step, 1.5x
// clock); 0 turns a signal off; "replace" loads; a factor near 1, a
// non-number and an unknown on_straggler are each one error with a fix.
func TestLoadStragglerKeys(t *testing.T) {
	dir := t.TempDir()
	load := func(lines ...string) (*Config, error) {
		job := filepath.Join(dir, "job.toml")
		require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, lines, hostA)), 0o644))
		return Load(job, LoadOptions{})
	}
	cfg, err := load()
	require.NoError(t, err)
	assert.Equal(t, Straggler{Factor: 3, ClockFactor: 1.5, On: StragglerWarn}, cfg.Job.Straggler)

	cfg, err = load(`straggler_factor = 0`, `straggler_clock_factor = 2.5`, `on_straggler = "warn"`)
	require.NoError(t, err)
	assert.Equal(t, Straggler{Factor: 0, ClockFactor: 2.5, On: StragglerWarn}, cfg.Job.Straggler)

	cfg, err = load(`on_straggler = "replace"`)
	require.NoError(t, err)
	assert.Equal(t, Straggler{Factor: 3, ClockFactor: 1.5, On: StragglerReplace}, cfg.Job.Straggler)

	for _, tc := range []struct {
		lines []string
		msg   string
		fix   string
	}{
		{lns(`straggler_factor = 1.1`), "too small: it must be 0 (off) or at least 1.5", "straggler_factor = 3.0"},
		{lns(`straggler_factor = "3x"`), "must be a number", "straggler_factor = 3.0"},
		{lns(`straggler_clock_factor = -1`), "too small", "straggler_clock_factor = 1.5"},
		{lns(`on_straggler = "wran"`), `unknown value "wran"`, `on_straggler = "warn" or "replace"`},
	} {
		_, err := load(tc.lines...)
		ces := configErrors(t, err)
		require.Len(t, ces, 1, "%v", err)
		assert.Equal(t, 5, ces[0].Line, "%v", ces[0])
		assert.Contains(t, ces[0].Error(), tc.msg)
		assert.Contains(t, ces[0].Fix, tc.fix)
	}
}
