package push

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// entry is what a test checks of one file or directory: content, mode and
// (for files) mtime to the second, which is what SFTP preserves.
type entry struct {
	Dir     bool
	Content string
	Mode    fs.FileMode
	MTime   int64
}

// snapshot reads every file and directory under dir through fsys,
// skipping the .drover state directory when skipState is set.
func snapshot(t *testing.T, fsys cluster.FS, dir string, skipState bool) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	var walk func(rel string)
	walk = func(rel string) {
		infos, err := fsys.ReadDir(path.Join(dir, rel))
		require.NoError(t, err)
		for _, info := range infos {
			p := path.Join(rel, info.Name())
			if skipState && p == stateDir {
				continue
			}
			if info.IsDir() {
				out[p] = entry{Dir: true, Mode: info.Mode().Perm()}
				walk(p)
				continue
			}
			if info.Mode()&fs.ModeSymlink != 0 { // push's sum
				target, err := fsys.Readlink(path.Join(dir, p))
				require.NoError(t, err)
				out[p] = entry{Content: "-> " + target}
				continue
			}
			r, err := fsys.Open(path.Join(dir, p))
			require.NoError(t, err)
			data, err := io.ReadAll(r)
			require.NoError(t, err)
			require.NoError(t, r.Close())
			out[p] = entry{Content: string(data), Mode: info.Mode().Perm(), MTime: info.ModTime().Unix()}
		}
	}
	walk("")
	return out
}

// localSnapshot is snapshot of a local directory.
func localSnapshot(t *testing.T, dir string) map[string]entry {
	return snapshot(t, cluster.NewOSFS(dir), dir, false)
}

// writeFiles creates files (content by slash path) under dir with mode
// 0644 and a fixed, distinct mtime each, so mtime preservation is visible.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
		mt := time.Date(2001, 2, 3, 4, 5, len(p)%60, 123456789, time.UTC)
		require.NoError(t, os.Chtimes(full, mt, mt))
	}
}

// op names the FS methods countingFS counts.
type op string

const (
	opStat, opLstat, opReadDir, opMkdirAll op = "Stat", "Lstat", "ReadDir", "MkdirAll"
	opMkdir                                op = "Mkdir"
	opCreate, opOpen, opRename, opRemove   op = "Create", "Open", "Rename", "Remove"
	opRemoveAll, opChmod, opChtimes        op = "RemoveAll", "Chmod", "Chtimes"
	opSymlink, opReadlink                  op = "Symlink", "Readlink"
)

// countingFS counts calls per method and records the paths given to
// Create and read (Open, Readlink), to prove what a push did and did not
// do.
type countingFS struct {
	cluster.FS
	mu      sync.Mutex
	calls   map[op]int
	created []string
	opened  []string
}

func newCountingFS(fsys cluster.FS) *countingFS {
	return &countingFS{FS: fsys, calls: map[op]int{}}
}

// streamingCountingFS is a countingFS that keeps the wrapped FS's tar
// stream, for tests of what a streamed push does over SFTP besides.
type streamingCountingFS struct {
	*countingFS
	x extractor
}

func newStreamingCountingFS(t *testing.T, fsys cluster.FS) streamingCountingFS {
	x, ok := fsys.(extractor)
	require.True(t, ok, "%T cannot stream", fsys)
	return streamingCountingFS{countingFS: newCountingFS(fsys), x: x}
}

func (c streamingCountingFS) ExtractTar(ctx context.Context, dir string, r io.Reader) error {
	return c.x.ExtractTar(ctx, dir, r)
}

func (c *countingFS) count(o op) {
	c.mu.Lock()
	c.calls[o]++
	c.mu.Unlock()
}

func (c *countingFS) n(o op) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[o]
}

// uploads counts files created under the temporary upload directory, i.e.
// file contents sent (the manifest is written there too and not counted).
func (c *countingFS) uploads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.created {
		if strings.Contains(p, tmpDir+"/f") {
			n++
		}
	}
	return n
}

func (c *countingFS) Stat(p string) (fs.FileInfo, error)  { c.count(opStat); return c.FS.Stat(p) }
func (c *countingFS) Lstat(p string) (fs.FileInfo, error) { c.count(opLstat); return c.FS.Lstat(p) }
func (c *countingFS) ReadDir(p string) ([]fs.FileInfo, error) {
	c.count(opReadDir)
	return c.FS.ReadDir(p)
}
func (c *countingFS) MkdirAll(p string, m fs.FileMode) error {
	c.count(opMkdirAll)
	return c.FS.MkdirAll(p, m)
}
func (c *countingFS) Mkdir(p string, m fs.FileMode) error {
	c.count(opMkdir)
	return c.FS.Mkdir(p, m)
}

// record counts o and appends p to list under the lock.
func (c *countingFS) record(o op, list *[]string, p string) {
	c.count(o)
	c.mu.Lock()
	*list = append(*list, p)
	c.mu.Unlock()
}

func (c *countingFS) Create(p string) (io.WriteCloser, error) {
	c.record(opCreate, &c.created, p)
	return c.FS.Create(p)
}
func (c *countingFS) Open(p string) (io.ReadCloser, error) {
	c.record(opOpen, &c.opened, p)
	return c.FS.Open(p)
}
func (c *countingFS) Readlink(p string) (string, error) {
	c.record(opReadlink, &c.opened, p)
	return c.FS.Readlink(p)
}
func (c *countingFS) Symlink(t, p string) error { c.count(opSymlink); return c.FS.Symlink(t, p) }
func (c *countingFS) Rename(a, b string) error  { c.count(opRename); return c.FS.Rename(a, b) }
func (c *countingFS) Remove(p string) error     { c.count(opRemove); return c.FS.Remove(p) }
func (c *countingFS) RemoveAll(p string) error {
	c.count(opRemoveAll)
	return c.FS.RemoveAll(p)
}
func (c *countingFS) Chmod(p string, m fs.FileMode) error { c.count(opChmod); return c.FS.Chmod(p, m) }
func (c *countingFS) Chtimes(p string, a, m time.Time) error {
	c.count(opChtimes)
	return c.FS.Chtimes(p, a, m)
}

// errCut is what cutFS returns once its connection is "cut".
var errCut = errors.New("connection cut (test)")

// cutFS behaves like a connection that dies: once budget bytes have been
// written through files it created (or its cut method is called, or the
// renames budget is spent), every operation fails with errCut.
type cutFS struct {
	cluster.FS
	budget  atomic.Int64 // bytes that may still be written
	renames atomic.Int64 // renames that may still succeed
	dead    atomic.Bool
}

func newCutFS(fsys cluster.FS, bytes, renames int64) *cutFS {
	c := &cutFS{FS: fsys}
	c.budget.Store(bytes)
	c.renames.Store(renames)
	return c
}

func (c *cutFS) err() error {
	if c.dead.Load() {
		return errCut
	}
	return nil
}

type cutWriter struct {
	io.WriteCloser
	c *cutFS
}

func (w cutWriter) Write(b []byte) (int, error) {
	if err := w.c.err(); err != nil {
		return 0, err
	}
	left := w.c.budget.Add(-int64(len(b)))
	if left < 0 {
		w.c.dead.Store(true)
		keep := max(0, int64(len(b))+left)
		n, _ := w.WriteCloser.Write(b[:keep])
		return n, errCut
	}
	return w.WriteCloser.Write(b)
}

func (w cutWriter) Close() error {
	err := w.WriteCloser.Close()
	if cerr := w.c.err(); cerr != nil {
		return cerr
	}
	return err
}

func (c *cutFS) Create(p string) (io.WriteCloser, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	w, err := c.FS.Create(p)
	if err != nil {
		return nil, err
	}
	return cutWriter{w, c}, nil
}

func (c *cutFS) Rename(a, b string) error {
	if err := c.err(); err != nil {
		return err
	}
	if c.renames.Add(-1) < 0 {
		c.dead.Store(true)
		return errCut
	}
	return c.FS.Rename(a, b)
}

func (c *cutFS) Stat(p string) (fs.FileInfo, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.FS.Stat(p)
}
func (c *cutFS) Lstat(p string) (fs.FileInfo, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.FS.Lstat(p)
}
func (c *cutFS) ReadDir(p string) ([]fs.FileInfo, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.FS.ReadDir(p)
}
func (c *cutFS) Mkdir(p string, m fs.FileMode) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.FS.Mkdir(p, m)
}
func (c *cutFS) MkdirAll(p string, m fs.FileMode) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.FS.MkdirAll(p, m)
}
func (c *cutFS) Open(p string) (io.ReadCloser, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.FS.Open(p)
}
func (c *cutFS) Remove(p string) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.FS.Remove(p)
}
func (c *cutFS) RemoveAll(p string) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.FS.RemoveAll(p)
}
func (c *cutFS) Chmod(p string, m fs.FileMode) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.FS.Chmod(p, m)
}
func (c *cutFS) Chtimes(p string, a, m time.Time) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.FS.Chtimes(p, a, m)
}
func (c *cutFS) Symlink(t, p string) error {
	if err := c.err(); err != nil {
		return err
	}
	return c.FS.Symlink(t, p)
}
func (c *cutFS) Readlink(p string) (string, error) {
	if err := c.err(); err != nil {
		return "", err
	}
	return c.FS.Readlink(p)
}

// treeManifest is what a host holds once it has t.
func treeManifest(t *Tree) *manifest {
	m := newManifest()
	for i := range t.Files {
		m.Files[t.Files[i].Path] = fileEntry(&t.Files[i])
	}
	for _, d := range t.Dirs {
		m.Dirs[d.Path] = manifestDir{Mode: d.Mode}
	}
	return m
}
