package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadSetup: setup, setup_key and setup_timeout load as written, and
// each mistake is refused on its line with a fix.
func TestLoadSetup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string // after jobHead (lines 1-4), before hostA
		line  int      // of the one error; 0 = loads
		want  Job      // Setup, SetupKey, SetupTimeout when it loads
		fix   string   // in the error's fix
	}{
		{name: "lines and keys", lines: lns(`setup = ["python3 -m venv .venv", ".venv/bin/pip install -r req.txt"]`, `setup_key = ["./req.txt", "sub/lock"]`, `setup_timeout = "5m"`),
			want: Job{Setup: []string{"python3 -m venv .venv", ".venv/bin/pip install -r req.txt"}, SetupKey: []string{"req.txt", "sub/lock"}, SetupTimeout: 5 * time.Minute}},
		{name: "default timeout", lines: lns(`setup = ["uv sync --frozen"]`),
			want: Job{Setup: []string{"uv sync --frozen"}, SetupTimeout: 30 * time.Minute}},
		{name: "setup as a string", lines: lns(`setup = "uv sync"`), line: 5, fix: `setup = ["uv sync"]`},
		{name: "an empty line", lines: lns(`setup = ["uv sync", " "]`), line: 5, fix: "remove the empty string"},
		{name: "key without setup", lines: lns(`setup_key = ["uv.lock"]`), line: 5, fix: `setup = ["uv sync --frozen"]`},
		{name: "key outside the code", lines: lns(`setup = ["uv sync"]`, `setup_key = ["../uv.lock"]`), line: 6, fix: "relative to the code directory"},
		{name: "absolute key", lines: lns(`setup = ["uv sync"]`, `setup_key = ["/etc/passwd"]`), line: 6, fix: "relative to the code directory"},
		{name: "zero timeout", lines: lns(`setup = ["uv sync"]`, `setup_timeout = "0s"`), line: 6, fix: `setup_timeout = "30m"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := filepath.Join(t.TempDir(), "job.toml")
			require.NoError(t, os.WriteFile(job, []byte(joinParts(jobHead, tc.lines, hostA)), 0o644))
			cfg, err := Load(job, LoadOptions{})
			if tc.line == 0 {
				require.NoError(t, err)
				assert.Equal(t, tc.want, Job{Setup: cfg.Job.Setup, SetupKey: cfg.Job.SetupKey, SetupTimeout: cfg.Job.SetupTimeout})
				return
			}
			ces := configErrors(t, err)
			require.Len(t, ces, 1, "want one error, got:\n%v", err)
			assert.Equal(t, tc.line, ces[0].Line, "%v", ces[0])
			assert.Equal(t, job, ces[0].File)
			assert.Contains(t, ces[0].Fix, tc.fix)
		})
	}
}
