//go:build linux

package agent

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// twoRanks is a group with two Python processes, faulthandler on, each
// printing its pid and then waiting (as ranks blocked in a collective).
const twoRanks = `PY='import os, time
print("rank pid %d" % os.getpid(), flush=True)
time.sleep(1000)'
PYTHONFAULTHANDLER=1 /usr/bin/python3 -c "$PY" &
PYTHONFAULTHANDLER=1 /usr/bin/python3 -c "$PY" &
wait`

// fakePySpy puts a py-spy first on PATH that appends its arguments to the
// returned file and prints a made-up stack naming the pid it was given, or
// fails as py-spy does without ptrace permission. Real py-spy is not
// installable on the test machines; this proves what drover asks of it and
// where its answer goes.
func fakePySpy(t *testing.T, fails bool) (calls string) {
	t.Helper()
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> '" + calls + "'\n"
	if fails {
		script += "echo 'Error: Permission Denied: Try running again with elevated permissions'\nexit 1\n"
	} else {
		script += "echo 'Thread 0x7f00 (idle): \"MainThread\"'\necho \"    all_reduce (train.py:42) of pid $3\"\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "py-spy"), []byte(script), 0o755))
	t.Setenv("PATH", dir+":/usr/bin:/bin")
	return calls
}

// TestStacksPySpy: on "stacks" the agent runs `py-spy dump --pid PID` for
// every Python process of the group when the host has py-spy, and each
// stack lands in the log; when py-spy fails or is missing, faulthandler's
// SIGABRT prints the stacks instead.
func TestStacksPySpy(t *testing.T) {
	testenv.LookPath(t, "/usr/bin/python3")
	for _, tt := range []struct {
		name       string
		pyspy      bool // a py-spy on PATH
		fails      bool
		want, not  []string // in the log, with PID for each rank's pid
		faultStack bool     // faulthandler printed the stacks
	}{
		{name: "py-spy", pyspy: true,
			want: []string{"stack of Python process PID (py-spy):", "all_reduce (train.py:42) of pid PID"}},
		{name: "py-spy fails: faulthandler", pyspy: true, fails: true,
			want: []string{"py-spy dump --pid PID failed", "asking Python process PID for its stack (SIGABRT, faulthandler)"}, faultStack: true},
		{name: "no py-spy: faulthandler",
			want: []string{"asking Python process PID for its stack (SIGABRT, faulthandler)"}, faultStack: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			calls := ""
			if tt.pyspy {
				calls = fakePySpy(t, tt.fails)
			} else {
				t.Setenv("PATH", "/usr/bin:/bin")
				_, err := exec.LookPath("py-spy")
				require.Error(t, err, "a py-spy is installed here")
			}
			logFile := filepath.Join(t.TempDir(), "worker-0.log")
			r, w := io.Pipe()
			defer w.Close()
			var out capture
			res := runAsync(context.Background(), RunOptions{
				Args: []string{"sh", "-c", twoRanks}, Grace: time.Minute, LogFile: logFile,
				Stdin: r, Stdout: &out, Stderr: &out,
			})
			var pids []string
			testenv.Wait(t, 20*time.Second, "two rank pids", func() (bool, string) {
				pids = nil
				for _, m := range regexp.MustCompile(`rank pid (\d+)`).FindAllStringSubmatch(out.String(), -1) {
					pids = append(pids, m[1])
				}
				return len(pids) >= 2, "output: " + out.String()
			})
			require.Len(t, pids, 2, "output: %s", out.String())
			io.WriteString(w, "stacks\n")
			if tt.faultStack {
				out.waitFor(t, "Fatal Python error", 20*time.Second)
			} else {
				out.waitFor(t, "of pid "+pids[1], 20*time.Second)
			}
			io.WriteString(w, "stop\n")
			got := await(t, res, 30*time.Second)
			require.NoError(t, got.err)

			logged, err := os.ReadFile(logFile)
			require.NoError(t, err)
			for _, pid := range pids {
				for _, s := range tt.want {
					assert.Contains(t, string(logged), strings.ReplaceAll(s, "PID", pid))
				}
			}
			// Two processes abort at once: their lines interleave.
			assert.Equal(t, tt.faultStack, strings.Contains(string(logged), "Fatal Python error"),
				"faulthandler's stacks in the log:\n%s", logged)
			if tt.pyspy {
				b, err := os.ReadFile(calls)
				require.NoError(t, err)
				got := strings.Split(strings.TrimSpace(string(b)), "\n")
				want := []string{"dump --pid " + pids[0], "dump --pid " + pids[1]}
				slices.Sort(got)
				slices.Sort(want)
				assert.Equal(t, want, got, "py-spy's arguments")
			}
		})
	}
}
