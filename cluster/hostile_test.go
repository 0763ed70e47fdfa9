package cluster_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
)

// loginShell makes shell fleet host i's login shell until the test ends.
func loginShell(t *testing.T, i int, shell string) {
	t.Helper()
	require.NoError(t, fleet.SetLoginShell(i, shell))
	t.Cleanup(func() { assert.NoError(t, fleet.SetLoginShell(i, "")) })
}

// bashrc gives fleet host i's user a ~/.bashrc (bash reads it for a
// command sshd runs, as for an interactive shell) until the test ends.
func bashrc(t *testing.T, i int, content string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "bashrc")
	require.NoError(t, os.WriteFile(f, []byte(content), 0o644))
	out, err := fleet.Exec(i, "install", "-o", fleettest.User, "-m", "644", f, "/home/drovertest/.bashrc")
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _, _ = fleet.Exec(i, "rm", "-f", "/home/drovertest/.bashrc") })
}

// TestSFTPLoginShellNamed gives a host the login shells and .bashrc files
// that break SFTP (one that prints, one that exits, nologin, /bin/false)
// and checks that opening SFTP says so, quoting what the shell printed
// (escaped), instead of pkg/sftp's "packet too long" or "unexpected EOF".
func TestSFTPLoginShellNamed(t *testing.T) {
	fleettest.Need(t, fleet)
	const i = 6
	h := fleet.Endpoints()[i]
	open := func(t *testing.T) error {
		tr := dialHost(t, h, hermetic())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := tr.FS(ctx)
		return err
	}
	for _, tc := range []struct {
		name, shell, rc, printed string
		exited                   bool
	}{
		{"bashrc prints", "/bin/bash", "printf 'Welcome to \\033[2J%s\\n' \"$(hostname)\"\n", `Welcome to \x1b[2J` + h.Name + `\n`, false},
		{"bashrc exits", "/bin/bash", "echo bye; exit\n", `bye\n`, true},
		{"nologin", "/usr/sbin/nologin", "", `This account is currently not available.\n`, true},
		{"false", "/bin/false", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loginShell(t, i, tc.shell)
			if tc.rc != "" {
				bashrc(t, i, tc.rc)
			}
			err := open(t)
			var le *cluster.LoginShellError
			require.True(t, errors.As(err, &le), "%v", err)
			assert.Equal(t, tc.exited, le.Exited)
			assert.Equal(t, tc.printed, le.Printed)
			assert.NotContains(t, err.Error(), "\x1b")
			if tc.exited {
				assert.Contains(t, err.Error(), "exited for a non-interactive session without running drover's command")
			} else {
				assert.Contains(t, err.Error(), "the login shell printed output for a non-interactive session")
			}
		})
	}
}

// TestHostileRemoveAll: a server that lists "" (which pkg/sftp hands on as
// ".") or "x/.." (as "..") inside a directory drover removes made
// RemoveAll recurse without end, a stack overflow that killed the
// controller, or remove the directory above. It is refused, naming the
// host, and the directory above is untouched.
func TestHostileRemoveAll(t *testing.T) {
	fleettest.Need(t, fleet)
	const i = 5
	h := fleet.Endpoints()[i]
	for _, name := range []string{"", "x/.."} {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			base := "/home/drovertest/hostile-rm"
			out, err := fleet.Exec(i, "sh", "-c", "mkdir -p "+base+"/victim/sub && echo keep > "+base+"/keep && chown -R drovertest "+base)
			require.NoError(t, err, "%s", out)
			t.Cleanup(func() { _, _ = fleet.Exec(i, "rm", "-rf", base) })
			require.NoError(t, fleet.HostileSFTP(i, []fleettest.SFTPRule{{Dir: base + "/victim/sub", Names: []fleettest.SFTPName{{Name: name, Dir: true}}}}))
			t.Cleanup(func() { assert.NoError(t, fleet.HostileSFTP(i, nil)) })
			tr := dialHost(t, h, hermetic())
			fsys, err := tr.FS(context.Background())
			require.NoError(t, err)
			err = fsys.RemoveAll(base + "/victim")
			var bad *cluster.BadNameError
			require.True(t, errors.As(err, &bad), "%v", err)
			assert.Equal(t, h.Name, bad.Host)
			out, err = fleet.Exec(i, "cat", base+"/keep")
			require.NoError(t, err)
			assert.Equal(t, "keep\n", string(out))
		})
	}
}
