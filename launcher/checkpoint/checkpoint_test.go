package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/testenv"
)

func TestIsTempName(t *testing.T) {
	for name, want := range map[string]bool{
		"step-100":           false,
		"model.pt":           false,
		"ckpt-0042":          false,
		".step-100":          true,
		"model.pt~":          true,
		"model.pt.tmp":       true,
		"model.PT.TMP":       true,
		"step-5.temp":        true,
		"model.pt.partial":   true,
		"model.pt.part":      true,
		"model.tmp.1234":     true,
		"model.tmp-abcd":     true,
		"tmpxyz":             true,
		"checkpoint-tmpdone": false,
	} {
		assert.Equal(t, want, IsTempName(name), name)
	}
}

func TestScan(t *testing.T) {
	home := t.TempDir()
	fsys := cluster.NewOSFS(home)
	mk := func(rel string, dir bool) {
		full := filepath.Join(home, rel)
		if dir {
			require.NoError(t, os.MkdirAll(full, 0o755))
			return
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte("x"), 0o644))
	}
	// Writes in progress never count.
	mk("files/step-1.pt", false)
	mk("files/step-2.pt", false)
	mk("files/step-3.pt.tmp", false)
	mk("files/.step-3.pt", false)
	require.NoError(t, os.Symlink("step-2.pt", filepath.Join(home, "files", "latest")))
	// With a marker, only directories holding it count.
	mk("dirs/step-1/DONE", false)
	mk("dirs/step-2/weights", false)
	mk("dirs/flat-file", false)

	names := func(dir, marker string) []string {
		found, err := Scan(context.Background(), fsys, "h0", filepath.Join(home, dir), marker)
		require.NoError(t, err)
		var out []string
		for _, f := range found {
			assert.Equal(t, "h0", f.Host)
			assert.Equal(t, filepath.Join(home, dir, f.Name), f.Path)
			out = append(out, f.Name)
		}
		return out
	}
	assert.Equal(t, []string{"step-1.pt", "step-2.pt"}, names("files", ""))
	assert.Equal(t, []string{"step-1"}, names("dirs", "DONE"))
	assert.Equal(t, []string{"flat-file", "step-1", "step-2"}, names("dirs", ""))
	assert.Empty(t, names("missing", ""))

	// A marker written again (a new save into the same directory) is a new
	// version of the entry.
	before, err := Scan(context.Background(), fsys, "h0", filepath.Join(home, "dirs"), "DONE")
	require.NoError(t, err)
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(home, "dirs/step-1/DONE"), later, later))
	after, err := Scan(context.Background(), fsys, "h0", filepath.Join(home, "dirs"), "DONE")
	require.NoError(t, err)
	assert.NotEqual(t, before[0].Stamp, after[0].Stamp)

	if os.Geteuid() != 0 {
		require.NoError(t, os.Chmod(filepath.Join(home, "files"), 0))
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(home, "files"), 0o755) })
		_, err := Scan(context.Background(), fsys, "h0", filepath.Join(home, "files"), "")
		assert.ErrorContains(t, err, "list checkpoints on h0 in "+filepath.Join(home, "files"))
	}
}

// TestWatchCopiesKeepsAndMirrors: a checkpoint written on one host ends up
// on checkpoint_copies hosts and in the mirror, byte for byte; drover keeps
// only checkpoint_keep of its own copies and never touches the user's.
func TestWatchCopiesKeepsAndMirrors(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2")
	m, ev, recPath := newManager(t)
	mirror := t.TempDir()
	set := Settings{Copies: 2, Keep: 2, Mirror: mirror, PollEvery: 10 * time.Millisecond}
	stop := m.Watch(context.Background(), hostsOf(hs...), set)
	defer stop()

	now := time.Now()
	data := map[int][]byte{}
	for seq := 1; seq <= 3; seq++ {
		name := "step-" + string(rune('0'+seq)) + ".pt"
		data[seq] = hs[0].write(t, name, 3<<20+seq, now.Add(time.Duration(seq)*time.Second))
		eventually(t, name+" copied to h1 and the mirror", func() bool {
			return len(holders(m, seq)) == 3
		})
		assert.ElementsMatch(t, []string{"written:h0", "copy:h1", "mirror:"}, holders(m, seq))
		fileEq(t, data[seq], hs[1].copyPath(seq, name))
		fileEq(t, data[seq], filepath.Join(mirror, seqDir(seq), name))
		assert.NoDirExists(t, filepath.Join(hs[2].Own, seqDir(seq)), "copies = 2: h0 and h1 hold it, h2 does not")
	}
	stop()
	t.Log(ev)

	// keep = 2: the oldest copy is gone from h1 and the mirror, and from
	// the record; the user's files on h0 are all still there, unchanged.
	assert.NoDirExists(t, filepath.Join(hs[1].Own, seqDir(1)))
	assert.NoDirExists(t, filepath.Join(mirror, seqDir(1)))
	assert.Equal(t, []string{"written:h0"}, holders(m, 1))
	for seq := 1; seq <= 3; seq++ {
		fileEq(t, data[seq], filepath.Join(hs[0].Dir, "step-"+string(rune('0'+seq))+".pt"))
	}
	userDir, err := os.ReadDir(hs[0].Dir)
	require.NoError(t, err)
	assert.Len(t, userDir, 3, "drover wrote nothing into the user's checkpoint_dir")
	assert.NoDirExists(t, hs[0].Own, "the writer gets no copy of its own checkpoint")

	// The record is on disk, in the order seen.
	rec, err := LoadRecord(recPath, "job")
	require.NoError(t, err)
	var seen []string
	for _, e := range rec.Entries() {
		seen = append(seen, e.Name)
		assert.NotEmpty(t, e.Digest)
		assert.EqualValues(t, 3<<20+e.Seq, e.Size)
	}
	assert.Equal(t, []string{"step-1.pt", "step-2.pt", "step-3.pt"}, seen)
}

// TestWatchCopiesOff: checkpoint_copies = 1 and no mirror copies nothing,
// but the record still says what completed when.
func TestWatchCopiesOff(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, _, _ := newManager(t)
	stop := m.Watch(context.Background(), hostsOf(hs...), Settings{Copies: 1, Keep: 2, PollEvery: 10 * time.Millisecond})
	hs[0].write(t, "a.pt", 100, time.Now())
	eventually(t, "a.pt recorded", func() bool { return len(m.Record().Entries()) == 1 })
	stop()
	assert.Equal(t, []string{"written:h0"}, holders(m, 1))
	assert.NoDirExists(t, hs[1].Own)
}

// TestSupersede: a newer checkpoint cancels the copy of an older one in
// flight; the older one's partial copy is removed and the newer one copied.
func TestSupersede(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, ev, _ := newManager(t)
	gate := &gatedFS{FS: hs[0].FS, path: filepath.Join(hs[0].Dir, "step-1.pt"), opened: make(chan struct{}), release: make(chan struct{})}
	hosts := hostsOf(hs...)
	hosts[0].FS = gate
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &watcher{m: m, hosts: hosts, set: Settings{Copies: 2, Keep: 2}, wake: make(chan struct{}, 1)}

	hs[0].write(t, "step-1.pt", 2<<20, time.Now())
	w.scan(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.copyLoop(ctx) }()
	<-gate.opened // the copy of step-1 is under way

	step2 := hs[0].write(t, "step-2.pt", 2<<20, time.Now())
	w.scan(ctx) // sees step-2: cancels the copy of step-1
	close(gate.release)
	eventually(t, "step-2 copied", func() bool { return len(holders(m, 2)) == 2 })
	cancel()
	<-done

	assert.Contains(t, ev.String(), "copy of checkpoint #1 superseded by a newer checkpoint")
	assert.Equal(t, []string{"written:h0"}, holders(m, 1), "step-1 was never copied")
	fileEq(t, step2, hs[1].copyPath(2, "step-2.pt"))
	entries, err := os.ReadDir(hs[1].Own)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only step-2's copy on h1, no leftover of step-1's")
	assert.Equal(t, seqDir(2), entries[0].Name())
}

// Issue 36, 7, the relay: a read from the source that never returns (the
// host's SFTP server stopped) ends the copy through the controller after
// the idle deadline, with an error that says so, instead of hanging it.
func TestRelayIdleDeadline(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, _, _ := newManager(t)
	m.idle = 200 * time.Millisecond
	gate := &gatedFS{FS: hs[0].FS, path: filepath.Join(hs[0].Dir, "step-1.pt"), opened: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(gate.release) })
	hosts := hostsOf(hs...)
	hosts[0].FS = gate
	set := Settings{Copies: 2, Keep: 2}
	hs[0].write(t, "step-1.pt", 1<<20, time.Now())
	require.NoError(t, m.reconcile(context.Background(), hosts, set))
	done := make(chan error, 1)
	go func() { done <- m.replicate(context.Background(), 1, hosts, set) }()
	var err error
	testenv.WaitFor(t, 20*time.Second, "the stalled copy ends", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	var idle *IdleError
	require.ErrorAs(t, err, &idle)
	assert.Contains(t, err.Error(), "h0:"+filepath.Join(hs[0].Dir, "step-1.pt")+" did not move for 200ms")
	assert.Equal(t, []string{"written:h0"}, holders(m, 1))
}
