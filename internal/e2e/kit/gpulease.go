package kit

import (
	"io/fs"
	"os"
	"testing"

	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/stretchr/testify/require"
)

// PrivateGPULeases gives fleet host i a GPU lease directory of its own:
// a fresh root-owned sticky directory bind-mounted over
// gpulease.DefaultDir in the mount namespace of the host's logins, as a
// real host has its own /tmp (the fleet's hosts share this machine's).
// It returns the directory as this machine sees it.
func PrivateGPULeases(t *testing.T, i int) string {
	t.Helper()
	if err := os.Mkdir(gpulease.DefaultDir, 0o777); err == nil {
		require.NoError(t, os.Chmod(gpulease.DefaultDir, 0o777|fs.ModeSticky))
	}
	dir, err := os.MkdirTemp("", "drover-gpu-leases-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o777|fs.ModeSticky))
	t.Cleanup(func() { os.RemoveAll(dir) })
	_, err = fleet.ExecInLogins(i, "mount", "--bind", dir, gpulease.DefaultDir)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Lazily: an agent of the test's run may still be exiting with a
		// lease open, and a mount left behind would point the next
		// test's hosts at this test's removed directory.
		if _, err := fleet.ExecInLogins(i, "umount", "--lazy", gpulease.DefaultDir); err != nil {
			t.Errorf("restore %s: %v", fleet.Hosts[i].Name, err)
		}
	})
	return dir
}
