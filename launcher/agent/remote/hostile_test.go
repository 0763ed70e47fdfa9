package remote

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/internal/fleettest"
)

// hostileLogin gives fleet host i bash as its login shell with rc as its
// ~/.bashrc (bash reads it for the commands sshd runs), until the test
// ends; shell "" leaves the shell alone.
func hostileLogin(t *testing.T, i int, shell, rc string) {
	t.Helper()
	fleettest.Need(t, fleet)
	if shell != "" {
		require.NoError(t, fleet.SetLoginShell(i, shell))
		t.Cleanup(func() { assert.NoError(t, fleet.SetLoginShell(i, "")) })
	}
	if rc != "" {
		f := filepath.Join(t.TempDir(), "bashrc")
		require.NoError(t, os.WriteFile(f, []byte(rc), 0o644))
		out, err := fleet.Exec(i, "install", "-o", "drovertest", "-m", "644", f, "/home/drovertest/.bashrc")
		require.NoError(t, err, "%s", out)
		t.Cleanup(func() { _, _ = fleet.Exec(i, "rm", "-f", "/home/drovertest/.bashrc") })
	}
}

// TestFleetInstallLoginShell: the install, drover's first command on a
// host, names what a login shell does wrong (prints, exits, lacks uname
// and coreutils in its PATH) in its own words, quoting the first bytes
// escaped; a shell printing endlessly without a newline (1.5 GB made the
// install keep 10.7 GB) stops it at its bound, with the controller's
// memory barely touched.
func TestFleetInstallLoginShell(t *testing.T) {
	for _, tc := range []struct {
		name, shell, rc string
		check           func(t *testing.T, err error)
	}{
		{"prints", "/bin/bash", "printf 'Welcome \\033[2J\\n'\n", func(t *testing.T, err error) {
			var le *cluster.LoginShellError
			require.True(t, errors.As(err, &le), "%v", err)
			assert.Equal(t, `Welcome \x1b[2J\n`, le.Printed)
			assert.False(t, le.Exited)
		}},
		{"exits", "/bin/bash", "exit\n", func(t *testing.T, err error) {
			var le *cluster.LoginShellError
			require.True(t, errors.As(err, &le), "%v", err)
			assert.True(t, le.Exited)
		}},
		{"nologin", "/usr/sbin/nologin", "", func(t *testing.T, err error) {
			var le *cluster.LoginShellError
			require.True(t, errors.As(err, &le), "%v", err)
			assert.True(t, le.Exited)
			assert.Equal(t, `This account is currently not available.\n`, le.Printed)
		}},
		{"no coreutils", "/bin/bash", "mkdir -p ~/minbin; ln -sf /bin/sh ~/minbin/sh; PATH=$HOME/minbin\n", func(t *testing.T, err error) {
			var me *MissingCommandsError
			require.True(t, errors.As(err, &me), "%v", err)
			assert.Equal(t, []string{"uname", "mkdir", "wc", "cat", "chmod", "mv", "rm"}, me.Commands)
			assert.Equal(t, "/home/drovertest/minbin", me.Path)
		}},
		{"endless", "/bin/bash", "yes | tr -d '\\n'\n", func(t *testing.T, err error) {
			var le *cluster.LoginShellError
			require.True(t, errors.As(err, &le), "%v", err)
			assert.Regexp(t, `^y{1000,}\.\.\. \d+ more bytes$`, le.Printed)
			assert.Less(t, len(err.Error()), 4<<10, "the error quotes a bounded head")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hostileLogin(t, 1, tc.shell, tc.rc) // before dialling: sshd reads the shell at login
			ts := dialFleet(t)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := install(t, ts[1], selfAgents(t))
			runtime.ReadMemStats(&after)
			t.Log(err)
			require.Error(t, err)
			tc.check(t, err)
			assert.NotContains(t, err.Error(), "\x1b")
			assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "the install read a bounded amount of the host's output")
		})
	}
}

// TestProbeOutputBounded: an nvidia-smi (or anything in its place) that
// prints without end is stopped at the probe's bound and named, not read
// into memory.
func TestProbeOutputBounded(t *testing.T) {
	ts := dialFleet(t)
	tr := installFakeSMI(t, ts[0], "h100x1")
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	w, err := fsys.Create(tr.script)
	require.NoError(t, err)
	_, err = w.Write([]byte("yes '\x1b[2J0, GPU-forged'\n"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rep := Probe(ctx, tr, Agents{})
	runtime.ReadMemStats(&after)
	t.Log(rep.Reason)
	assert.Equal(t, gpu.SourceNone, rep.Source)
	assert.Contains(t, rep.Reason, "printed more than")
	assert.NotContains(t, rep.Reason, "\x1b")
	assert.Less(t, len(rep.Reason), 8<<10)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20))
}
