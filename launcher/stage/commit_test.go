package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/testenv"
)

func TestLeafDirs(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		want  []string
	}{
		{name: "top level only", files: []string{"a", "b"}, want: []string{"/d/data"}},
		{name: "a parent of another is made by it", files: []string{"a", "x/b", "x/y/c", "x/y/d"}, want: []string{"/d/data/x/y"}},
		{name: "siblings", files: []string{"x/a", "z/b", "x-1/c"}, want: []string{"/d/data/x", "/d/data/x-1", "/d/data/z"}},
		{name: "a name that only starts like a parent", files: []string{"x/a", "x-y/b", "x/q/c"}, want: []string{"/d/data/x-y", "/d/data/x/q"}},
		{name: "nothing", files: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, leafDirs("/d/data", tt.files))
		})
	}
}

func TestInFlight(t *testing.T) {
	items := make([]int, 100)
	for i := range items {
		items[i] = i
	}
	var mu sync.Mutex
	var got []int
	require.NoError(t, inFlight(context.Background(), 8, items, func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, i)
		return nil
	}))
	assert.ElementsMatch(t, items, got, "every item, once")

	// One at a time, the first failure stops the rest and is returned.
	var done []int
	err := inFlight(context.Background(), 1, items, func(i int) error {
		done = append(done, i)
		if i == 3 {
			return fmt.Errorf("item %d failed", i)
		}
		return nil
	})
	require.EqualError(t, err, "item 3 failed")
	assert.Equal(t, []int{0, 1, 2, 3}, done)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, inFlight(ctx, 4, items, func(int) error { t.Error("started after ctx ended"); return nil }), context.Canceled)

	// Ended as the last item finished: everything was done.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	assert.NoError(t, inFlight(ctx, 1, items[:3], func(i int) error {
		if i == 2 {
			cancel()
		}
		return nil
	}))
	assert.NoError(t, inFlight(context.Background(), 4, []int(nil), func(int) error { return nil }))
}

// overlapFS is a local FS whose Renames wait until `want` of them have
// been in flight at once (bounded by testenv.Until): a commit that waits
// for each answer before the next request fails.
type overlapFS struct {
	cluster.FS
	want     int64
	inFlight atomic.Int64
	reached  atomic.Bool
}

func (f *overlapFS) Rename(from, to string) error {
	if f.inFlight.Add(1) >= f.want {
		f.reached.Store(true)
	}
	defer f.inFlight.Add(-1)
	if err := testenv.Until(10*time.Second, fmt.Sprintf("%d renames in flight", f.want), f.reached.Load); err != nil {
		return err
	}
	return f.FS.Rename(from, to)
}

// TestPlacePipelines: a batch's files are moved into place with many
// requests in flight at once (over SFTP, each one at a time is a round
// trip and a wake-up of the host's sshd), into new and existing
// directories, each with its source mtime, and nothing is left behind.
func TestPlacePipelines(t *testing.T) {
	dir := t.TempDir()
	from, dest := filepath.Join(dir, "area", "1", "data"), filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(filepath.Join(dest, "d0"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dest, "d0", "f0"), []byte("old"), 0o644))
	var files []string
	for i := range 100 {
		rel := fmt.Sprintf("d%d/f%d", i%7, i)
		if i%10 == 0 {
			rel = fmt.Sprintf("d%d/sub/f%d", i%3, i)
		}
		files = append(files, rel)
		require.NoError(t, os.MkdirAll(filepath.Join(from, path.Dir(rel)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(from, rel), []byte(rel), 0o600))
	}
	fsys := &overlapFS{FS: cluster.NewOSFS(dir), want: min(commitInFlight, 8)}
	h := Host{Name: "h1", FS: fsys}
	mtime := func(rel string) int64 { return 1_700_000_000 + int64(len(rel)) }
	require.NoError(t, place(context.Background(), h, from, dest, files, mtime))
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(dest, rel))
		require.NoError(t, err, rel)
		assert.Equal(t, rel, string(b))
		fi, err := os.Stat(filepath.Join(dest, rel))
		require.NoError(t, err)
		assert.Equal(t, mtime(rel), fi.ModTime().Unix(), rel)
		_, err = os.Stat(filepath.Join(from, rel))
		assert.True(t, errors.Is(err, os.ErrNotExist), "%s left in the batch", rel)
	}
}

// TestPlaceNamesTheFile: a file that cannot be moved names itself, the
// destination and the host.
func TestPlaceNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	h := Host{Name: "h1", FS: cluster.NewOSFS(dir)}
	err := place(context.Background(), h, filepath.Join(dir, "batch"), filepath.Join(dir, "data"), []string{"gone"}, func(string) int64 { return 0 })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "move gone into "+filepath.Join(dir, "data")+" on h1")
}
