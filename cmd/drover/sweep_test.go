//go:build !droveragent

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad sweep input exits 2 naming the flag or key and the fix, before any
// host is dialled (the host's address is unroutable).
func TestSweepBadInputExits2(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(`[job]
name = "s"
framework = "pytorch"
command = ["python3", "train.py", "--lr={lr}"]

[[host]]
name = "a"
address = "192.0.2.1"
`), 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--param", "lr=1..0"}, "--param lr=1..0"},
		{[]string{"--param", "lr=0.1,1", "--param", "wd=normal(0,1)"}, "wd"},
		{[]string{"--param", "rate=0.1"}, "{lr}"},
		{[]string{"--param", "lr=0.1", "--goal", "up"}, "--goal"},
		{[]string{"--param", "lr=0.1", "--early-stop", "mean"}, "--early-stop"},
		{[]string{}, "no parameters"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"drover", "sweep", job}, tc.args...), &stdout, &stderr)
		assert.Equal(t, 2, code, "%v: %s", tc.args, stderr.String())
		assert.Contains(t, stderr.String(), tc.want, tc.args)
		assert.Contains(t, stderr.String(), "fix:", tc.args)
	}
}
