package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
)

// pushJob writes a job with local hosts (one workdir each) and a code
// directory, and returns the job path and the hosts' workdirs.
func pushJob(t *testing.T, workdirs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	code := filepath.Join(dir, "code")
	for p, c := range map[string]string{"train.py": "print(1)\n", "lib/m.py": "m\n", "run.log": "excluded\n", ".droverignore": "*.tmp\n", "x.tmp": "excluded\n"} {
		full := filepath.Join(code, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(c), 0o644))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[job]\nname = \"pushtest\"\nframework = \"pytorch\"\ncommand = [\"python3\", \"train.py\"]\ncode = \"code\"\nworkdir = \"drover/pushtest\"\nexclude = [\"*.log\"]\n")
	for _, name := range []string{"a", "b"} {
		fmt.Fprintf(&b, "\n[[host]]\nname = %q\ntransport = \"local\"\nworkdir = %q\ngpus = []\n", name, workdirs[name])
	}
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(b.String()), 0o644))
	return job
}

func runPush(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(append([]string{"drover", "push"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

var summaryLine = regexp.MustCompile(`^(\w+): (\d+) sent \(([0-9.]+ k?B)\), (\d+) deleted, (\d+) unchanged in \d+\.\ds$`)

func TestPushCommand(t *testing.T) {
	root := t.TempDir()
	wa, wb := filepath.Join(root, "a"), filepath.Join(root, "b")
	job := pushJob(t, map[string]string{"a": wa, "b": wb})

	code, stdout, stderr := runPush(job)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Empty(t, stderr, "no progress or noise off a terminal")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2, stdout)
	for i, name := range []string{"a", "b"} {
		m := summaryLine.FindStringSubmatch(lines[i])
		require.NotNil(t, m, "summary line %q", lines[i])
		// train.py 9 B + lib/m.py 2 B + .droverignore 6 B
		assert.Equal(t, []string{name, "3", "17 B", "0", "0"}, m[1:6])
	}
	for _, w := range []string{wa, wb} {
		data, err := os.ReadFile(filepath.Join(w, "lib/m.py"))
		require.NoError(t, err)
		assert.Equal(t, "m\n", string(data))
		for _, excluded := range []string{"run.log", "x.tmp"} {
			_, err := os.Stat(filepath.Join(w, excluded))
			assert.True(t, os.IsNotExist(err), "%s pushed", excluded)
		}
	}

	// Again, to one host only: nothing to send.
	code, stdout, stderr = runPush("--hosts", "b", job)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	m := summaryLine.FindStringSubmatch(strings.TrimSpace(stdout))
	require.NotNil(t, m, stdout)
	assert.Equal(t, []string{"b", "0", "0 B", "0", "3"}, m[1:6])
}

func TestPushCommandHostFailure(t *testing.T) {
	root := t.TempDir()
	blocker := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	job := pushJob(t, map[string]string{"a": filepath.Join(root, "a"), "b": filepath.Join(blocker, "sub")})

	code, stdout, stderr := runPush(job)
	assert.Equal(t, agent.ExitFailed, code)
	assert.Regexp(t, `^a: 3 sent`, stdout, "the healthy host is pushed and reported")
	assert.NotContains(t, stdout, "b:")
	assert.Contains(t, stderr, "push to b (")
	assert.Contains(t, stderr, "not a directory")
	assert.Contains(t, stderr, "push failed on 1 of 2 hosts")
}

func TestPushCommandLocalErrors(t *testing.T) {
	root := t.TempDir()
	job := pushJob(t, map[string]string{"a": filepath.Join(root, "a"), "b": filepath.Join(root, "b")})
	code := filepath.Join(filepath.Dir(job), "code")

	// An escaping symlink stops the push before any host is touched.
	require.NoError(t, os.Symlink("/etc", filepath.Join(code, "etc")))
	status, _, stderr := runPush(job)
	assert.Equal(t, agent.ExitFailed, status)
	assert.Contains(t, stderr, "symlink etc -> /etc points outside the code directory")
	_, err := os.Stat(filepath.Join(root, "a"))
	assert.True(t, os.IsNotExist(err), "host touched despite the bad tree")
	require.NoError(t, os.Remove(filepath.Join(code, "etc")))

	// A bad .droverignore is a configuration error.
	require.NoError(t, os.WriteFile(filepath.Join(code, ".droverignore"), []byte("[oops\n"), 0o644))
	status, _, stderr = runPush(job)
	assert.Equal(t, agent.ExitUsage, status)
	assert.Contains(t, stderr, ".droverignore:1:")

	status, _, _ = runPush()
	assert.Equal(t, agent.ExitUsage, status)
	status, _, _ = runPush("--hosts", "zz", job)
	assert.Equal(t, agent.ExitUsage, status)
}

// TestPushCommandSameRuleAsRun: with code = "." (the examples' layout),
// `drover push` sends neither runs/ (which `drover run` writes there and
// never pushed) nor checkpoint_dir, and --verify repairs a file edited on
// a host that a plain push trusts.
func TestPushCommandSameRuleAsRun(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(t.TempDir(), "w")
	files := map[string]string{
		"train.py":                    "print(1)\n",
		"runs/job-1/events.log":       "a local run's log\n",
		"checkpoints/step-1/model.pt": "a local smoke test's weights\n",
		"job.toml": fmt.Sprintf("[job]\nname = \"rule\"\nframework = \"pytorch\"\ncommand = [\"python3\", \"train.py\"]\ncode = \".\"\n"+
			"workdir = %q\ncheckpoint_dir = \"checkpoints\"\n\n[[host]]\nname = \"a\"\ntransport = \"local\"\ngpus = []\n", work),
	}
	for p, c := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(c), 0o644))
	}
	// A dangling link (issue 21) is skipped, with a warning.
	require.NoError(t, os.Symlink("nowhere", filepath.Join(dir, "stale")))
	job := filepath.Join(dir, "job.toml")
	code, _, stderr := runPush(job)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Contains(t, stderr, "warning: symlink stale -> nowhere: its target does not exist; skipped")
	for _, p := range []string{"runs", "checkpoints"} {
		_, err := os.Stat(filepath.Join(work, p))
		assert.True(t, os.IsNotExist(err), "%s pushed: %v", p, err)
	}

	train := filepath.Join(work, "train.py")
	info, err := os.Stat(train)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(train, []byte("print(2)\n"), 0o644))
	require.NoError(t, os.Chtimes(train, info.ModTime(), info.ModTime()))
	code, stdout, stderr := runPush(job)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Contains(t, stdout, "a: 0 sent")
	code, stdout, stderr = runPush("--verify", job)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Contains(t, stdout, "a: 1 sent")
	data, err := os.ReadFile(train)
	require.NoError(t, err)
	assert.Equal(t, "print(1)\n", string(data))
}

// TestInterruptedPushMessage: the message after Ctrl-C says, per host,
// what it holds; before, it said "hosts not finished keep their previous
// tree" even of a host whose commit had moved some files.
func TestInterruptedPushMessage(t *testing.T) {
	hosts := []config.Host{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}
	outcomes := []launcher.PushOutcome{
		{},
		{Err: fmt.Errorf("push to b: %w", context.Canceled)},
		{Err: fmt.Errorf("push to c: %w", &push.CommitError{Err: errors.New("connection lost")})},
		{Err: fmt.Errorf("push to d: %w", context.Canceled)},
	}
	var out, errb bytes.Buffer
	err := reportPush(&out, &errb, hosts, outcomes, true)
	var ec cli.ExitCoder
	require.True(t, errors.As(err, &ec))
	assert.Equal(t, agent.ExitInterrupted, ec.ExitCode())
	assert.Equal(t, "push interrupted: a has the new tree; b, d kept their previous tree; c holds a mix of previous and new files until the next push or run repairs it", err.Error())
	assert.Contains(t, errb.String(), "push to c: stopped while moving files into place (connection lost)")
}
