package push

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// roundDelay is what one request costs roundFS. It only has to exceed how
// late a goroutine may start after its siblings (the race detector on a
// busy machine), so that requests sent together are seen together.
const roundDelay = 30 * time.Millisecond

// roundFS counts a push's sequential rounds of requests, which is what
// its time is made of at a distance (a round is one network latency),
// without measuring any time: each request takes a fixed delay and is
// given the round 1 + the highest round among the requests that had ended
// before it started. A call costs as many requests as it does through
// pkg/sftp to OpenSSH's sftp-server (cluster.sftpFS), e.g. a Remove of a
// missing file two (REMOVE, then RMDIR), a ReadDir four.
type roundFS struct {
	cluster.FS
	home string // where the wrapped OSFS resolves relative paths

	mu    sync.Mutex
	ended int // the highest round among the requests that ended
	log   []string
}

func newRoundFS(home string) *roundFS {
	return &roundFS{FS: cluster.NewOSFS(home), home: home}
}

// rounds is the highest round any call reached.
func (r *roundFS) rounds() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// call runs fn as n requests in a row (none: no request at all).
func (r *roundFS) call(name, p string, n int, fn func()) {
	if n == 0 {
		fn()
		return
	}
	r.mu.Lock()
	first := r.ended + 1
	r.mu.Unlock()
	time.Sleep(time.Duration(n) * roundDelay)
	fn()
	last := first + n - 1
	r.mu.Lock()
	r.ended = max(r.ended, last)
	r.log = append(r.log, fmt.Sprintf("%2d..%2d %s %s", first, last, name, p))
	r.mu.Unlock()
}

func (r *roundFS) lstat(p string) fs.FileInfo {
	full := p
	if !filepath.IsAbs(p) {
		full = filepath.Join(r.home, p)
	}
	info, _ := os.Lstat(full)
	return info
}

// missingUp is how many of p and its parents do not exist.
func (r *roundFS) missingUp(p string) int {
	n := 0
	for ; p != "." && p != "/" && r.lstat(p) == nil; p = path.Dir(p) {
		n++
	}
	return n
}

func (r *roundFS) Stat(p string) (info fs.FileInfo, err error) {
	r.call("stat", p, 1, func() { info, err = r.FS.Stat(p) })
	return
}
func (r *roundFS) Lstat(p string) (info fs.FileInfo, err error) {
	r.call("lstat", p, 1, func() { info, err = r.FS.Lstat(p) })
	return
}
func (r *roundFS) Readlink(p string) (s string, err error) {
	r.call("readlink", p, 1, func() { s, err = r.FS.Readlink(p) })
	return
}
func (r *roundFS) Symlink(t, p string) (err error) {
	r.call("symlink", p, 1, func() { err = r.FS.Symlink(t, p) })
	return
}

// ReadDir: opendir, readdir, readdir (end), close.
func (r *roundFS) ReadDir(p string) (infos []fs.FileInfo, err error) {
	r.call("readdir", p, 4, func() { infos, err = r.FS.ReadDir(p) })
	return
}

// MkdirAll: a mkdir beside a stat, and one more per missing parent.
func (r *roundFS) MkdirAll(p string, m fs.FileMode) (err error) {
	r.call("mkdirall", p, max(1, r.missingUp(p)), func() { err = r.FS.MkdirAll(p, m) })
	return
}

// Mkdir: a mkdir, and a chmod for a mode other than 0755.
func (r *roundFS) Mkdir(p string, m fs.FileMode) (err error) {
	n := 1
	if m != 0 && m.Perm() != 0o755 {
		n = 2
	}
	r.call("mkdir", p, n, func() { err = r.FS.Mkdir(p, m) })
	return
}
func (r *roundFS) Rename(a, b string) (err error) {
	r.call("rename", a+" -> "+b, 1, func() { err = r.FS.Rename(a, b) })
	return
}
func (r *roundFS) Chmod(p string, m fs.FileMode) (err error) {
	r.call("chmod", p, 1, func() { err = r.FS.Chmod(p, m) })
	return
}
func (r *roundFS) Chtimes(p string, a, m time.Time) (err error) {
	r.call("chtimes", p, 1, func() { err = r.FS.Chtimes(p, a, m) })
	return
}

// Remove: REMOVE, then RMDIR when that fails (a directory, or nothing
// there), as pkg/sftp's Client.Remove does.
func (r *roundFS) Remove(p string) (err error) {
	n := 1
	if info := r.lstat(p); info == nil || info.IsDir() {
		n = 2
	}
	r.call("remove", p, n, func() { err = r.FS.Remove(p) })
	return
}

// RemoveDir: one RMDIR.
func (r *roundFS) RemoveDir(p string) (err error) {
	r.call("rmdir", p, 1, func() {
		if info := r.lstat(p); info != nil && !info.IsDir() {
			err = &fs.PathError{Op: "rmdir", Path: p, Err: errors.New("not a directory")}
			return
		}
		err = r.FS.Remove(p)
	})
	return
}

// RemoveAll: an lstat, then a listing and a removal per directory level
// (the push removes only its flat upload directory this way).
func (r *roundFS) RemoveAll(p string) (err error) {
	n := 1
	if info := r.lstat(p); info != nil && info.IsDir() {
		n = 1 + 4 + 2 // lstat, readdir, one round of removes, rmdir
	}
	r.call("removeall", p, n, func() { err = r.FS.RemoveAll(p) })
	return
}

// ExtractTar: a session opened, tar started, the stream, its end and
// tar's exit, as through SSH (about six round trips at 50 ms).
func (r *roundFS) ExtractTar(ctx context.Context, dir string, rd io.Reader) (err error) {
	r.call("extracttar", dir, 6, func() { err = r.FS.(extractor).ExtractTar(ctx, dir, rd) })
	return
}

func (r *roundFS) Create(p string) (w io.WriteCloser, err error) {
	r.call("create", p, 1, func() { w, err = r.FS.Create(p) })
	if err != nil {
		return nil, err
	}
	return &roundWriter{w: w, r: r, p: p}, nil
}
func (r *roundFS) Open(p string) (rc io.ReadCloser, err error) {
	r.call("open", p, 1, func() { rc, err = r.FS.Open(p) })
	if err != nil {
		return nil, err
	}
	return &roundReader{rc: rc, r: r, p: p}, nil
}

type roundWriter struct {
	w io.WriteCloser
	r *roundFS
	p string
}

func (w *roundWriter) Write(b []byte) (n int, err error) {
	cost := 1
	if len(b) == 0 {
		cost = 0
	}
	w.r.call("write", w.p, cost, func() { n, err = w.w.Write(b) })
	return
}
func (w *roundWriter) Close() (err error) {
	w.r.call("close", w.p, 1, func() { err = w.w.Close() })
	return
}

type roundReader struct {
	rc io.ReadCloser
	r  *roundFS
	p  string
}

func (rr *roundReader) Read(b []byte) (n int, err error) {
	rr.r.call("read", rr.p, 1, func() { n, err = rr.rc.Read(b) })
	return
}
func (rr *roundReader) Close() (err error) {
	rr.r.call("close", rr.p, 1, func() { err = rr.rc.Close() })
	return
}

// roundCases are the trees TestPushRounds pushes, with the rounds each
// push may take at most. Before Options.NewWorkdir and the cuts that came
// with it, they took (first, change): 13, 11; 24, 11; 39, 15; 22, 11.
var roundCases = []struct {
	name  string
	files map[string]string
	// first: into a new workdir: the plan's requests (1), upload
	// (create, write, close: 3) beside the directories (a round per
	// level), mark (1), files and manifest moved in (1), sum (1).
	first int
	// change: of train.py: the host's sum, then the upload (create,
	// write, close), beside the listing of its tree (4), mark (1), file
	// and delta moved in (1), sum (1).
	change int
}{
	{"one file", map[string]string{"train.py": "print('v1')\n"}, 7, 7},
	{"v1 (directories 5 deep)", v1, 9, 7},
	{"20 empty directories", emptyDirs(20), 7, 7},
	// first: the plan's requests (1), the stream (6), mark (1), trees
	// and files moved in (1), sum beside removing the staged trees'
	// directory (1), the upload directory (1).
	{"streamed (40 files)", manyFiles(40), 11, 7},
}

// manyFiles is train.py and n files in a few directories: enough to go
// as one tar stream.
func manyFiles(n int) map[string]string {
	files := map[string]string{"train.py": "print('v1')\n"}
	for i := range n {
		files[fmt.Sprintf("pkg%d/sub/f%02d.py", i%4, i)] = "x = 1\n"
	}
	return files
}

// emptyDirs is a tree of train.py and n empty directories (a path ending
// in "/" is a directory for pushRounds).
func emptyDirs(n int) map[string]string {
	dirs := map[string]string{"train.py": "print('v1')\n"}
	for i := range n {
		dirs[fmt.Sprintf("pkg%02d/", i)] = ""
	}
	return dirs
}

// TestPushRounds counts the rounds of requests of the pushes that a
// fresh host and a restart after an edit wait for: the first into a new
// workdir (Options.NewWorkdir), then one of a changed file, both verified
// as `drover run` does. Each is measured up to three times and the fewest
// kept: a busy machine can only add rounds (a request started late), never
// remove one.
func TestPushRounds(t *testing.T) {
	for _, tc := range roundCases {
		t.Run(tc.name, func(t *testing.T) {
			first, change := 99, 99
			for try := 0; try < 3 && (first > tc.first || change > tc.change); try++ {
				f, c := pushRounds(t, tc.files)
				first, change = min(first, f), min(change, c)
			}
			require.LessOrEqual(t, first, tc.first, "rounds of a first push into a new workdir")
			require.LessOrEqual(t, change, tc.change, "rounds of a push of one changed file")
		})
	}
}

// pushRounds pushes files into a workdir that holds only its state
// directory, then the same with train.py changed, and returns the rounds
// each took.
func pushRounds(t *testing.T, files map[string]string) (first, change int) {
	local, home, cache := t.TempDir(), t.TempDir(), t.TempDir()
	for p, content := range files {
		if strings.HasSuffix(p, "/") {
			require.NoError(t, os.MkdirAll(filepath.Join(local, p), 0o755))
		} else {
			writeFiles(t, local, map[string]string{p: content})
		}
	}
	require.NoError(t, os.MkdirAll(filepath.Join(home, "work", stateDir), 0o755))
	opts := Options{Verify: VerifyStat, CacheDir: cache, NewWorkdir: true}
	push := func() int {
		tree, err := ScanLocal(local, opts)
		require.NoError(t, err)
		rfs := newRoundFS(home)
		_, err = Sync(t.Context(), rfs, "h", tree, "work", opts)
		require.NoError(t, err)
		if testing.Verbose() {
			for _, l := range rfs.log {
				t.Log(l)
			}
		}
		return rfs.rounds()
	}
	first = push()
	writeFiles(t, local, map[string]string{"train.py": "print('v2')\n"})
	opts.NewWorkdir = false
	change = push()
	require.Equal(t, localSnapshot(t, local), snapshot(t, cluster.NewOSFS(home), "work", true))
	return first, change
}
