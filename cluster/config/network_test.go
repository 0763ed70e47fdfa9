package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBandwidth(t *testing.T) {
	for s, want := range map[string]float64{"10Gbit": 10e9, "50 Mbit/s": 50e6, "1.5Gbit": 1.5e9, "400kbit": 400e3, "8bit": 8} {
		got, err := ParseBandwidth(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "Gbit", "10", "10GB", "10 gbit", "0Mbit", "-1Gbit", "1e30Tbit"} {
		_, err := ParseBandwidth(s)
		assert.Error(t, err, s)
	}
	assert.Equal(t, "9.410 Gbit/s", FormatBandwidth(9.41e9))
	assert.Equal(t, "50.000 Mbit/s", FormatBandwidth(50e6))
}

// min_bandwidth and preflight load, and each bad value is one error on
// its own line with a fix.
func TestLoadNetworkKeys(t *testing.T) {
	load := func(lines ...string) (*Config, error) {
		dir := t.TempDir()
		job := filepath.Join(dir, "job.toml")
		require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, lines, hostA)), 0o644))
		return Load(job, LoadOptions{})
	}
	cfg, err := load(`min_bandwidth = "10Gbit"`, `preflight = ["net"]`)
	require.NoError(t, err)
	assert.Equal(t, 10e9, cfg.Job.MinBandwidth)
	assert.Equal(t, []string{"net"}, cfg.Job.Preflight)

	cfg, err = load()
	require.NoError(t, err)
	assert.Zero(t, cfg.Job.MinBandwidth)
	assert.Empty(t, cfg.Job.Preflight)

	for _, tc := range []struct {
		lines []string
		line  int
		msg   string
	}{
		{lns(`min_bandwidth = "10GB"`), 5, `unknown unit "GB"`},
		{lns(`min_bandwidth = 10`), 5, "must be a bandwidth string"},
		{lns(`max_restarts = 1`, `preflight = ["net", "gpu-burn"]`), 6, `unknown check "gpu-burn"`},
		{lns(`preflight = "net"`), 5, "array of strings"},
	} {
		_, err := load(tc.lines...)
		ces := configErrors(t, err)
		require.Len(t, ces, 1, "%v", err)
		assert.Equal(t, tc.line, ces[0].Line, "%v", ces[0])
		assert.Contains(t, ces[0].Error(), tc.msg)
		assert.NotEmpty(t, ces[0].Fix)
	}
}
