package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/testenv"
)

// testHost is a host whose files live in a directory of its own (the local
// transport's FS), as each fleet host has a home of its own.
type testHost struct {
	Host
	home string
}

func newHosts(t *testing.T, names ...string) []testHost {
	t.Helper()
	out := make([]testHost, len(names))
	for i, n := range names {
		home := t.TempDir()
		out[i] = testHost{home: home, Host: Host{Name: n, FS: cluster.NewOSFS(home),
			Dir: filepath.Join(home, "work", "checkpoints"), Own: OwnDir(filepath.Join(home, "work"))}}
	}
	return out
}

func hostsOf(hs ...testHost) []Host {
	out := make([]Host, len(hs))
	for i, h := range hs {
		out[i] = h.Host
	}
	return out
}

// write saves a checkpoint file as training code does (temp name, rename)
// with the given modification time, and returns its content.
func (h testHost) write(t *testing.T, name string, size int, mtime time.Time) []byte {
	t.Helper()
	data := make([]byte, size)
	rand.New(rand.NewSource(int64(len(name) + size))).Read(data)
	copy(data, name) // distinct content per name
	require.NoError(t, os.MkdirAll(h.Dir, 0o755))
	tmp := filepath.Join(h.Dir, "."+name+".tmp")
	require.NoError(t, os.WriteFile(tmp, data, 0o644))
	require.NoError(t, os.Chtimes(tmp, mtime, mtime))
	require.NoError(t, os.Rename(tmp, filepath.Join(h.Dir, name)))
	return data
}

// copyPath is where drover's copy of checkpoint seq named name is on h.
func (h testHost) copyPath(seq int, name string) string {
	return filepath.Join(h.Own, seqDir(seq), name)
}

// tree lists every file under dir with its size, for "nothing changed"
// assertions.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %d %s\n", rel, fi.Size(), fi.ModTime().UTC().Format(time.RFC3339Nano))
		return nil
	})
	require.NoError(t, err)
	return b.String()
}

func fileEq(t *testing.T, want []byte, path string) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "%s differs from the checkpoint written (%d vs %d bytes)", path, len(got), len(want))
}

// events collects a Manager's event lines.
type events struct {
	mu    sync.Mutex
	lines []string
}

func (e *events) printf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lines = append(e.lines, fmt.Sprintf(format, args...))
}

func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines, "\n")
}

// newManager is a Manager over a fresh record in a temp directory.
func newManager(t *testing.T) (*Manager, *events, string) {
	t.Helper()
	path := RecordPath(t.TempDir(), "job")
	rec, err := LoadRecord(path, "job")
	require.NoError(t, err)
	ev := &events{}
	return New(rec, ev.printf, nil), ev, path
}

// eventually waits for cond (no timing is asserted: the bound only ends a
// hung test).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, what, cond)
}

// holders lists where the record says checkpoint seq is, as "kind:host".
func holders(m *Manager, seq int) []string {
	var out []string
	for _, e := range m.Record().Entries() {
		if e.Seq == seq {
			for _, l := range e.Held {
				out = append(out, l.Kind+":"+l.Host)
			}
		}
	}
	return out
}

// gatedFS holds the first Read of one path until release is closed, and
// says on opened when that path was opened: a copy caught mid-flight.
type gatedFS struct {
	cluster.FS
	path    string
	opened  chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gatedFS) Open(p string) (io.ReadCloser, error) {
	r, err := g.FS.Open(p)
	if err != nil || p != g.path {
		return r, err
	}
	g.once.Do(func() { close(g.opened) })
	return gatedReader{ReadCloser: r, release: g.release}, nil
}

type gatedReader struct {
	io.ReadCloser
	release chan struct{}
}

func (g gatedReader) Read(p []byte) (int, error) {
	<-g.release
	return g.ReadCloser.Read(p)
}

var _ = context.Background
