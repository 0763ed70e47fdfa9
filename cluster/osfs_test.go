package cluster

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOSFSResolvesRelativePathsUnderHome(t *testing.T) {
	home := t.TempDir()
	other := t.TempDir()
	fsys := NewOSFS(home)

	got, err := fsys.Home()
	require.NoError(t, err)
	assert.Equal(t, home, got)

	tests := []struct {
		name string
		path string // as given to the FS
		real string // where it must land on disk
	}{
		{"relative", "work/a.txt", filepath.Join(home, "work/a.txt")},
		{"absolute", filepath.Join(other, "b.txt"), filepath.Join(other, "b.txt")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, fsys.MkdirAll(filepath.Dir(tc.path), 0o755))
			w, err := fsys.Create(tc.path)
			require.NoError(t, err)
			_, err = io.WriteString(w, tc.name)
			require.NoError(t, err)
			require.NoError(t, w.Close())

			data, err := os.ReadFile(tc.real)
			require.NoError(t, err)
			assert.Equal(t, tc.name, string(data))

			r, err := fsys.Open(tc.path)
			require.NoError(t, err)
			data, err = io.ReadAll(r)
			require.NoError(t, err)
			require.NoError(t, r.Close())
			assert.Equal(t, tc.name, string(data))
		})
	}
}

func TestOSFSOperations(t *testing.T) {
	home := t.TempDir()
	fsys := NewOSFS(home)
	write := func(p, s string) {
		t.Helper()
		w, err := fsys.Create(p)
		require.NoError(t, err)
		_, err = io.WriteString(w, s)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	require.NoError(t, fsys.MkdirAll("d/sub", 0o755))
	write("d/x", "old")
	write("d/y", "new")

	// Rename replaces the target.
	require.NoError(t, fsys.Rename("d/y", "d/x"))
	data, err := os.ReadFile(filepath.Join(home, "d/x"))
	require.NoError(t, err)
	assert.Equal(t, "new", string(data))
	_, err = fsys.Stat("d/y")
	assert.True(t, errors.Is(err, fs.ErrNotExist), "Stat of a renamed-away file: %v", err)

	// Chmod and Chtimes show through Stat.
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, fsys.Chmod("d/x", 0o751))
	require.NoError(t, fsys.Chtimes("d/x", mtime, mtime))
	info, err := fsys.Stat("d/x")
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o751), info.Mode().Perm())
	assert.True(t, info.ModTime().Equal(mtime), "mtime %v", info.ModTime())
	assert.Equal(t, int64(3), info.Size())

	// Lstat does not follow links; Stat does.
	require.NoError(t, os.Symlink("x", filepath.Join(home, "d/link")))
	li, err := fsys.Lstat("d/link")
	require.NoError(t, err)
	assert.True(t, li.Mode()&fs.ModeSymlink != 0)
	si, err := fsys.Stat("d/link")
	require.NoError(t, err)
	assert.True(t, si.Mode().IsRegular())

	// ReadDir lists names with Lstat information.
	infos, err := fsys.ReadDir("d")
	require.NoError(t, err)
	var names []string
	for _, fi := range infos {
		names = append(names, fi.Name())
	}
	sort.Strings(names)
	assert.Equal(t, []string{"link", "sub", "x"}, names)

	// Remove and RemoveAll; missing files report fs.ErrNotExist.
	require.NoError(t, fsys.Remove("d/link"))
	require.NoError(t, fsys.RemoveAll("d"))
	_, err = fsys.Lstat("d")
	assert.True(t, errors.Is(err, fs.ErrNotExist))
	_, err = fsys.Open("d/x")
	assert.True(t, errors.Is(err, fs.ErrNotExist))
	_, err = fsys.ReadDir("d")
	assert.True(t, errors.Is(err, fs.ErrNotExist))
	assert.True(t, errors.Is(fsys.Remove("d/x"), fs.ErrNotExist))
}

// TestOSFSFreeSpace: what statfs says is left, for push's "no space
// left" (the SFTP one is exercised on a full host by cluster/push).
func TestOSFSFreeSpace(t *testing.T) {
	home := t.TempDir()
	fsys := NewOSFS(home).(interface{ FreeSpace(string) (int64, error) })
	free, err := fsys.FreeSpace(".")
	require.NoError(t, err)
	assert.Positive(t, free)
	_, err = fsys.FreeSpace("missing/dir")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}
