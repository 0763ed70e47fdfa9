package cluster_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// TestCommandFSOverSSH: an FS served by a command drover starts over the
// SSH connection (here OpenSSH's own sftp-server; drover's copies use
// `drover agent sftp --low-priority`) reads and writes relative to the
// login home, and Close ends the command: nothing is left running on the
// host.
func TestCommandFSOverSSH(t *testing.T) {
	fleettest.Need(t, fleet)
	const server = "/usr/lib/openssh/sftp-server"
	_, err := os.Stat(server)
	testenv.Need(t, server+" (openssh-server)", err)
	tr, err := cluster.Dial(context.Background(), fleet.Endpoints()[2], hermetic())
	require.NoError(t, err)
	defer tr.Close()
	// A start directory of its own (sftp-server -d) makes relative paths
	// land there, and tells this test's server from any other on the
	// machine.
	name := fmt.Sprintf("commandfs-%d", os.Getpid())
	local := filepath.Join(fleet.Dir, "hosts", fleet.Hosts[2].Name, "home", name)
	require.NoError(t, os.MkdirAll(local, 0o777))
	t.Cleanup(func() { os.RemoveAll(local) })
	require.NoError(t, os.Chmod(local, 0o777))
	start := "/home/" + fleet.User + "/" + name
	fsys, err := cluster.OpenCommandFS(context.Background(), tr, []string{server, "-d", start})
	require.NoError(t, err)

	w, err := fsys.Create("ck.bin")
	require.NoError(t, err)
	_, err = io.Copy(w, strings.NewReader(strings.Repeat("checkpoint ", 100_000)))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	b, err := os.ReadFile(filepath.Join(local, "ck.bin"))
	require.NoError(t, err)
	assert.Equal(t, 1_100_000, len(b))
	assert.Equal(t, "1\n", output(t, tr, "pgrep", "-c", "-f", start), "the server runs on the host")

	require.NoError(t, fsys.Close())
	assert.Equal(t, "0\n", outputAny(t, tr, "pgrep", "-c", "-f", start), "the server left running on the host")
}

// outputAny runs args on tr and returns its stdout whatever the exit status.
func outputAny(t *testing.T, tr cluster.Transport, args ...string) string {
	t.Helper()
	var stdout strings.Builder
	p, err := tr.Start(context.Background(), cluster.Cmd{Args: args, Stdout: &stdout})
	require.NoError(t, err)
	_ = p.Wait()
	return stdout.String()
}
