package cluster

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootFSConfined checks that the mirror's FS writes nowhere outside
// its directory: not through an absolute path, a "..", nor a link a
// previous copy (or anyone) left inside it.
func TestRootFSConfined(t *testing.T) {
	top := t.TempDir()
	victim := filepath.Join(top, ".bashrc")
	require.NoError(t, os.WriteFile(victim, []byte("mine\n"), 0o644))
	dir := filepath.Join(top, "mirror")
	fsys := NewRootFS(dir)
	require.NoError(t, fsys.MkdirAll(filepath.Join(dir, "000001.tmp", "step"), 0o700))
	w, err := fsys.Create(filepath.Join(dir, "000001.tmp", "step", "w.pt"))
	require.NoError(t, err)
	_, err = io.WriteString(w, "weights")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, fsys.Rename(filepath.Join(dir, "000001.tmp"), filepath.Join(dir, "000001")))
	got, err := os.ReadFile(filepath.Join(dir, "000001", "step", "w.pt"))
	require.NoError(t, err)
	assert.Equal(t, "weights", string(got))
	infos, err := fsys.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.Equal(t, "000001", infos[0].Name())

	require.NoError(t, os.Symlink(top, filepath.Join(dir, "out")))
	for _, p := range []string{victim, filepath.Join(dir, "..", ".bashrc"), "../.bashrc", filepath.Join(dir, "out", ".bashrc")} {
		_, err := fsys.Create(p)
		assert.Error(t, err, "create %s", p)
		assert.Error(t, fsys.Rename(filepath.Join(dir, "000001"), p), "rename onto %s", p)
	}
	assert.Error(t, fsys.MkdirAll(filepath.Join(dir, "out", "x"), 0o700))
	assert.NoError(t, fsys.RemoveAll(filepath.Join(dir, "000001")))
	got, err = os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "mine\n", string(got))
	_, err = os.Stat(filepath.Join(top, "x"))
	assert.True(t, os.IsNotExist(err))
	assert.NoError(t, NewRootFS(filepath.Join(top, "none")).RemoveAll(filepath.Join(top, "none", "000001")))
}
