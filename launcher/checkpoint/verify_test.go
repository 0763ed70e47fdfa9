package checkpoint

import (
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
)

// TestStageVerifiesCopies: drover's copies damaged on their hosts after
// they were made (h2's truncated to 10 bytes, h1's rewritten in place at
// the same size) are not handed out as DROVER_RESUME_FROM: staging sends
// them again, whole, and says why.
func TestStageVerifiesCopies(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2")
	m, ev, _ := newManager(t)
	set := Settings{Copies: 1, Keep: 2}
	hosts := hostsOf(hs...)
	data := hs[0].write(t, "step-5.pt", 64<<10, time.Now())
	watchOnce(t, m, hosts, set)
	first, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)

	require.NoError(t, os.Truncate(first["h2"], 10))
	garbage := make([]byte, len(data))
	require.NoError(t, os.WriteFile(first["h1"], garbage, 0o644))
	ev.lines = nil

	again, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	t.Log(ev)
	assert.Equal(t, first, again)
	fileEq(t, data, again["h1"])
	fileEq(t, data, again["h2"])
	assert.Contains(t, ev.String(), "step-5.pt is 10 bytes; its MANIFEST says 65536")
	assert.Contains(t, ev.String(), "step-5.pt changed since the copy was made")
	assert.Contains(t, ev.String(), "staged 64.0 KiB from h0:"+filepath.Join(hs[0].Dir, "step-5.pt")+" onto h1, h2")

	// Whole copies are checked by size alone: nothing is read again.
	ev.lines = nil
	_, err = m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.NotContains(t, ev.String(), "staged")
}

// TestScanSkipsSpecialFiles: a fifo (or socket, or device) in
// checkpoint_dir is never a checkpoint. One became the "newest" and every
// process resuming from it blocked in open() for good.
func TestScanSkipsSpecialFiles(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, _, _ := newManager(t)
	set := Settings{Copies: 2, Keep: 2}
	hosts := hostsOf(hs...)
	data := hs[0].write(t, "step-5.pt", 100, time.Now())
	watchOnce(t, m, hosts, set)
	require.NoError(t, syscall.Mkfifo(filepath.Join(hs[0].Dir, "step-6.pt"), 0o644))
	watchOnce(t, m, hosts, set)
	require.Len(t, m.Record().Entries(), 1)

	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(hs[0].Dir, "step-5.pt"), paths["h0"])
	fileEq(t, data, paths["h1"])
}

// TestFleetStageVerifiesCopies is the same over SSH, on the hosts
// themselves: a copy truncated on h2 is sent again and every host
// resumes from content identical to what h0 wrote; a fifo made on h1 in
// its checkpoint_dir is ignored, and staging (bounded here) never blocks
// on it.
func TestFleetStageVerifiesCopies(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := fleetHosts(t)
	m, ev, _ := newManager(t)
	set := Settings{Copies: 1, Keep: 2}
	writeOn(t, 0, hosts[0], "step-5.pt", 2, 0)
	want := sumOn(t, 0, path.Join(hosts[0].Dir, "step-5.pt"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first, err := m.Stage(ctx, hosts, set)
	require.NoError(t, err)

	out, err := fleet.Exec(2, "truncate", "-s", "10", first[hosts[2].Name])
	require.NoError(t, err, "%s", out)
	require.NoError(t, hosts[1].FS.MkdirAll(hosts[1].Dir, 0o755))
	out, err = fleet.Exec(1, "sh", "-c", `mkfifo "$1" && chown "$2" "$1"`, "sh", path.Join(hosts[1].Dir, "step-9.pt"), fleettest.User)
	require.NoError(t, err, "%s", out)
	ev.lines = nil

	again, err := m.Stage(ctx, hosts, set)
	require.NoError(t, err)
	t.Log(ev)
	assert.Equal(t, first, again)
	assert.Contains(t, ev.String(), "step-5.pt is 10 bytes; its MANIFEST says 2097152")
	assert.Contains(t, ev.String(), "onto "+hosts[2].Name+" in")
	for i, h := range hosts {
		assert.Equal(t, want, sumOn(t, i, again[h.Name]), "%s resumes from what h0 wrote", h.Name)
	}
	require.Len(t, m.Record().Entries(), 1, "the fifo is not a checkpoint")
}

// syncFS records, in order, each file of a copy flushed to disk (Sync on
// what Create returned) and each rename: a real local FS underneath.
type syncFS struct {
	cluster.FS
	mu  sync.Mutex
	log []string
}

func (s *syncFS) note(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, what)
}

func (s *syncFS) Create(p string) (io.WriteCloser, error) {
	w, err := s.FS.Create(p)
	if err != nil {
		return nil, err
	}
	return &syncWriter{WriteCloser: w, fs: s, path: path.Base(p)}, nil
}

func (s *syncFS) Rename(oldpath, newpath string) error {
	s.note("rename " + path.Base(oldpath))
	return s.FS.Rename(oldpath, newpath)
}

type syncWriter struct {
	io.WriteCloser
	fs   *syncFS
	path string
}

func (w *syncWriter) Sync() error {
	w.fs.note("sync " + w.path)
	return w.WriteCloser.(interface{ Sync() error }).Sync()
}

// TestCopyIsOnDiskBeforeItsRename: every file of a copy, and its
// MANIFEST, is flushed to disk before the rename that says the copy is
// whole; a crash after it cannot leave a whole-looking copy of lost data.
func TestCopyIsOnDiskBeforeItsRename(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, _, _ := newManager(t)
	set := Settings{Marker: "DONE", Copies: 1, Keep: 2}
	hs[0].writeShard(t, "step-3", "weights")
	rec := &syncFS{FS: hs[1].FS}
	hosts := hostsOf(hs...)
	hosts[1].FS = rec
	watchOnce(t, m, hosts, set)
	_, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Equal(t, []string{"sync DONE", "sync shard.bin", "sync MANIFEST", "rename 000001.tmp"}, rec.log)
}

// openFS counts the opens of one file.
type openFS struct {
	cluster.FS
	path  string
	opens int
}

func (o *openFS) Open(p string) (io.ReadCloser, error) {
	if p == o.path {
		o.opens++
	}
	return o.FS.Open(p)
}

// TestVerifyReadsOnlyWhatChanged: checking a whole copy before a restart
// reads its MANIFEST and stats its files, and reads no file whole, not
// even the one written in the same second as the MANIFEST (a single-file
// checkpoint of many GiB would be read at every restart); a file touched
// since is read and checked.
func TestVerifyReadsOnlyWhatChanged(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, _, _ := newManager(t)
	set := Settings{Copies: 1, Keep: 2}
	hosts := hostsOf(hs...)
	hs[0].write(t, "big.pt", 1<<20, time.Now())
	watchOnce(t, m, hosts, set)
	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	counted := &openFS{FS: hosts[1].FS, path: paths["h1"]}
	hosts[1].FS = counted

	_, err = m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Zero(t, counted.opens, "a whole copy is not read again")

	now := time.Now()
	require.NoError(t, os.Chtimes(paths["h1"], now, now))
	_, err = m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Equal(t, 1, counted.opens, "a file touched since the copy is read and checked")
	assert.Contains(t, holders(m, 1), "copy:h1", "its content is unchanged: the copy stays")
}
