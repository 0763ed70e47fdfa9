package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/internal/fleettest/lighthost"
	"github.com/droverhq/drover/launcher/fanout"
)

// Environment of the child process that TestPushUnderLowFileLimit runs:
// the job file to push, and the RLIMIT_NOFILE to set first.
const (
	pushChildJob    = "DROVER_TEST_PUSH_CHILD_JOB"
	pushChildNofile = "DROVER_TEST_PUSH_CHILD_NOFILE"
	pushChildExec   = "DROVER_TEST_PUSH_CHILD_EXEC" // run `true` instead of pushing
)

// TestPushUnderLowFileLimit pushes a first tree of 12 files of 256 KiB to
// 32 hosts (light SSH hosts, one server in this process) from a child
// process whose `ulimit -n` is 256, as on many machines: each host's
// files went up 16 at a time, every local file opened once per host at
// once, and the push failed. Under a limit no push can live with (24,
// with 32 connections to make), the failure says "too many open files
// (ulimit -n 24)", never "auth failed ... no usable key".
func TestPushUnderLowFileLimit(t *testing.T) {
	if job := os.Getenv(pushChildJob); job != "" {
		pushChild(t, job)
		return
	}
	dir := t.TempDir()
	f, err := lighthost.NewFleet(filepath.Join(dir, "fleet"), "lh", 32, "")
	require.NoError(t, err)
	defer f.Close()
	code := filepath.Join(dir, "code")
	require.NoError(t, os.MkdirAll(code, 0o755))
	for i := range 12 {
		data := bytes.Repeat([]byte{byte('a' + i)}, 256<<10)
		require.NoError(t, os.WriteFile(filepath.Join(code, fmt.Sprintf("f%02d.bin", i)), data, 0o644))
	}
	job := filepath.Join(dir, "job.toml")
	require.NoError(t, os.WriteFile(job, []byte(fmt.Sprintf(
		"inventory = %q\n[job]\nname = \"nofile\"\nframework = \"pytorch\"\ncommand = [\"true\"]\ncode = %q\nworkdir = \"w\"\n",
		f.Inventory, code)), 0o644))

	out, err := runPushChild(t, job, 256)
	require.NoError(t, err, "%s", out)
	assert.Equal(t, 32, strings.Count(out, ": ok\n"), "%s", out)
	for i := range 32 {
		home := filepath.Join(f.Dir, "hosts", fmt.Sprintf("lh-h%d", i), "home")
		fi, err := os.Stat(filepath.Join(home, "w", "f11.bin"))
		require.NoError(t, err)
		assert.Equal(t, int64(256<<10), fi.Size())
	}

	out, err = runPushChild(t, job, 24)
	require.Error(t, err, "%s", out)
	assert.Contains(t, out, "too many open files (ulimit -n 24)")
	assert.NotContains(t, out, "auth failed")
	assert.NotContains(t, out, "no usable key")

	// drover exec has no scan to fail first: the dials meet the limit.
	t.Setenv(pushChildExec, "1")
	out, err = runPushChild(t, job, 16)
	require.Error(t, err, "%s", out)
	assert.Contains(t, out, "too many open files (ulimit -n 16)")
	assert.NotContains(t, out, "auth failed")
	assert.NotContains(t, out, "no usable key")
	assert.NotContains(t, out, "unreachable")
}

// runPushChild runs this test again in a child process that pushes job
// under RLIMIT_NOFILE nofile, and returns what it printed.
func runPushChild(t *testing.T, job string, nofile int) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPushUnderLowFileLimit$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), pushChildJob+"="+job, pushChildNofile+"="+strconv.Itoa(nofile))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// pushChild is the child: lower the limit, push, print one line per host.
func pushChild(t *testing.T, job string) {
	n, err := strconv.ParseUint(os.Getenv(pushChildNofile), 10, 64)
	require.NoError(t, err)
	var rl syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl))
	rl.Cur = n
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl))
	cfg, err := config.Load(job, config.LoadOptions{})
	require.NoError(t, err)
	dial := cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none", ConnectTimeout: time.Minute}
	if os.Getenv(pushChildExec) != "" {
		var failed []error
		for _, r := range fanout.Exec(context.Background(), cfg.Hosts, fanout.ExecOptions{Args: []string{"true"}, Dial: dial, Stdout: os.Stdout, Stderr: os.Stdout}) {
			fmt.Printf("%s: %v\n", r.Host, r.Err)
			failed = append(failed, r.Err)
		}
		require.NoError(t, errors.Join(failed...))
		return
	}
	res, err := Push(context.Background(), cfg, cfg.Hosts, PushOptions{Dial: dial})
	require.NoError(t, err)
	var failed []error
	for i, h := range res.Hosts {
		if h.Err != nil {
			fmt.Printf("%s: %v\n", cfg.Hosts[i].Name, h.Err)
			failed = append(failed, h.Err)
			continue
		}
		fmt.Printf("%s: ok\n", cfg.Hosts[i].Name)
	}
	require.NoError(t, errors.Join(failed...))
}
