package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// watchOnce records what the hosts hold now, as a Watcher's poll does.
func watchOnce(t *testing.T, m *Manager, hosts []Host, set Settings) {
	t.Helper()
	w := &watcher{m: m, hosts: hosts, set: set, wake: make(chan struct{}, 1)}
	w.scan(context.Background())
}

// TestStageNewestByRecordNotClock: h0's clock is an hour ahead, so its
// older checkpoint has the newer modification time. drover resumes from
// the one it saw complete last, and puts it on every host.
func TestStageNewestByRecordNotClock(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2")
	m, ev, _ := newManager(t)
	set := Settings{Copies: 1, Keep: 2}
	hosts := hostsOf(hs...)

	hs[0].write(t, "step-10.pt", 1000, time.Now().Add(time.Hour)) // h0's clock is ahead
	watchOnce(t, m, hosts, set)
	newer := hs[1].write(t, "step-20.pt", 1000, time.Now())
	watchOnce(t, m, hosts, set)

	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	t.Log(ev)
	assert.Equal(t, map[string]string{
		"h0": hs[0].copyPath(2, "step-20.pt"),
		"h1": filepath.Join(hs[1].Dir, "step-20.pt"), // its own file: nothing to send
		"h2": hs[2].copyPath(2, "step-20.pt"),
	}, paths)
	for _, h := range hs {
		fileEq(t, newer, paths[h.Name])
	}
	assert.ElementsMatch(t, []string{"written:h1", "copy:h0", "copy:h2"}, holders(m, 2))
	assert.Contains(t, ev.String(), "resuming from checkpoint step-20.pt (#2")
}

// TestStageSkipsHostsWithTheSameContent: a second Stage sends nothing to
// hosts whose copy has the recorded content, and re-sends to a host whose
// copy was damaged.
func TestStageSkipsHostsWithTheSameContent(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2")
	m, ev, _ := newManager(t)
	set := Settings{Copies: 1, Keep: 2}
	hosts := hostsOf(hs...)
	data := hs[0].write(t, "step-5.pt", 4096, time.Now())
	watchOnce(t, m, hosts, set)

	first, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	h1Before, h2Before := tree(t, hs[1].Own), tree(t, hs[2].Own)
	ev.lines = nil

	second, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Equal(t, first, second)
	assert.Equal(t, h1Before, tree(t, hs[1].Own), "h1 already held it: not sent again")
	assert.Equal(t, h2Before, tree(t, hs[2].Own), "h2 already held it: not sent again")
	assert.NotContains(t, ev.String(), "staged")
	// The resume message says whose file each host resumes from.
	assert.Contains(t, ev.String(), "its own file "+second["h0"]+" on h0")
	assert.Contains(t, ev.String(), "drover's copy "+second["h1"]+" on h1")

	// h2's copy loses its MANIFEST (a copy cut short): it is sent again.
	require.NoError(t, os.Remove(filepath.Join(hs[2].Own, seqDir(1), ManifestName)))
	third, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Equal(t, first, third)
	assert.Equal(t, h1Before, tree(t, hs[1].Own))
	assert.Contains(t, ev.String(), "staged 4.0 KiB from h0:"+filepath.Join(hs[0].Dir, "step-5.pt")+" onto h2")
	fileEq(t, data, third["h2"])
}

// TestStageAfterLostHost is the lost-host story without a network: the
// writer h0 is gone, h1 holds drover's copy, the spare h3 joins. The new
// group resumes from the copy, staged onto h2 and h3 through the
// controller.
func TestStageAfterLostHost(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2", "h3")
	m, _, _ := newManager(t)
	set := Settings{Copies: 2, Keep: 2, PollEvery: 10 * time.Millisecond}
	stop := m.Watch(context.Background(), hostsOf(hs[0], hs[1], hs[2]), set)
	data := hs[0].write(t, "step-20.pt", 1<<20, time.Now())
	eventually(t, "step-20 copied", func() bool { return len(holders(m, 1)) == 2 })
	stop()

	group := hostsOf(hs[3], hs[1], hs[2]) // h3 stands in for h0
	paths, err := m.Stage(context.Background(), group, set)
	require.NoError(t, err)
	require.Len(t, paths, 3)
	for _, h := range group {
		assert.NotContains(t, paths[h.Name], hs[0].home)
		fileEq(t, data, paths[h.Name])
	}
	assert.Equal(t, hs[3].copyPath(1, "step-20.pt"), paths["h3"])
}

// TestStageFromMirror: no host of the group holds the checkpoint any more;
// the mirror on the controller does.
func TestStageFromMirror(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2")
	m, ev, _ := newManager(t)
	set := Settings{Copies: 1, Keep: 2, Mirror: t.TempDir(), PollEvery: 10 * time.Millisecond}
	stop := m.Watch(context.Background(), hostsOf(hs[0]), set)
	data := hs[0].write(t, "ckpt", 70000, time.Now())
	eventually(t, "mirrored", func() bool { return len(holders(m, 1)) == 2 })
	stop()

	paths, err := m.Stage(context.Background(), hostsOf(hs[1], hs[2]), set)
	require.NoError(t, err)
	fileEq(t, data, paths["h1"])
	fileEq(t, data, paths["h2"])
	assert.Contains(t, ev.String(), "from mirror:"+filepath.Join(set.Mirror, seqDir(1), "ckpt"))
}

// TestStageFallsBackWhenNewestIsGone: training code deleted its newest
// checkpoint; the one before it, still on a host, is used.
func TestStageFallsBackWhenNewestIsGone(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, _, _ := newManager(t)
	set := Settings{Copies: 1, Keep: 2}
	hosts := hostsOf(hs...)
	hs[0].write(t, "a", 10, time.Now())
	watchOnce(t, m, hosts, set)
	hs[0].write(t, "b", 10, time.Now())
	watchOnce(t, m, hosts, set)
	require.NoError(t, os.Remove(filepath.Join(hs[0].Dir, "b")))

	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(hs[0].Dir, "a"), paths["h0"])
	assert.Empty(t, holders(m, 2), "the record knows b is gone")
}

// TestStageNothing: no checkpoint anywhere is no resume path and no error.
func TestStageNothing(t *testing.T) {
	hs := newHosts(t, "h0")
	m, _, _ := newManager(t)
	paths, err := m.Stage(context.Background(), hostsOf(hs...), Settings{Copies: 2, Keep: 2})
	require.NoError(t, err)
	assert.Nil(t, paths)
}

// TestStageDirectoryCheckpoint: a checkpoint that is a directory (with a
// marker) is copied whole, subdirectories included.
func TestStageDirectoryCheckpoint(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, _, _ := newManager(t)
	set := Settings{Marker: "DONE", Copies: 1, Keep: 2}
	hosts := hostsOf(hs...)
	dir := filepath.Join(hs[0].Dir, "step-7")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "shards"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shards", "0.bin"), []byte("zero"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta.json"), []byte("{}"), 0o644))
	watchOnce(t, m, hosts, set)
	assert.Empty(t, m.Record().Entries(), "no marker yet: not complete")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "DONE"), nil, 0o644))
	watchOnce(t, m, hosts, set)

	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Equal(t, hs[1].copyPath(1, "step-7"), paths["h1"])
	fileEq(t, []byte("zero"), filepath.Join(paths["h1"], "shards", "0.bin"))
	fileEq(t, []byte("{}"), filepath.Join(paths["h1"], "meta.json"))
	assert.FileExists(t, filepath.Join(paths["h1"], "DONE"))
}

// TestPruneKeepsTheCopyJustMade: keep counts the copy just made (even an
// older one, staged when the newest could not be) and removes the oldest
// others, and leftovers of copies cut short; nothing else in the area.
func TestPruneKeepsTheCopyJustMade(t *testing.T) {
	own := t.TempDir()
	for _, d := range []string{"000001", "000002", "000003", "000004.tmp", "notes"} {
		require.NoError(t, os.MkdirAll(filepath.Join(own, d), 0o755))
	}
	removed, err := prune(cluster.NewOSFS(own), own, 2, 1)
	require.NoError(t, err)
	assert.Equal(t, []int{2}, removed)
	left, err := os.ReadDir(own)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"000001", "000003", "notes"}, names)
}

// TestRecordForgetsOldCheckpointsHeldNowhere: the record of a long job
// stays bounded; checkpoints still held somewhere are never forgotten.
func TestRecordForgetsOldCheckpointsHeldNowhere(t *testing.T) {
	path := RecordPath(t.TempDir(), "job")
	rec, err := LoadRecord(path, "job")
	require.NoError(t, err)
	rec.max = 10
	for i := range 15 {
		loc := Location{Kind: Written, Host: "h", Path: fmt.Sprintf("/c-%d", i), Stamp: "s"}
		_, err := rec.Saw([]Found{{Host: loc.Host, Name: fmt.Sprintf("c-%d", i), Path: loc.Path, Stamp: loc.Stamp}}, time.Now())
		require.NoError(t, err)
		if i != 1 { // c-1 stays on its host; the training deletes the others
			require.NoError(t, rec.Drop(i+1, loc))
		}
	}
	again, err := LoadRecord(path, "job")
	require.NoError(t, err)
	es := again.Entries()
	require.Len(t, es, 10)
	assert.Equal(t, "c-1", es[0].Name, "held: kept")
	assert.Equal(t, "c-6", es[1].Name, "the oldest held nowhere are forgotten")
	assert.Equal(t, 15, es[len(es)-1].Seq)
}

// TestRecordSameNameRules: one checkpoint saved by every host (same name
// and size) is one entry with several holders, and needs no copy; a file
// saved again under the same name (last.pt every epoch) is a new, newer
// checkpoint.
func TestRecordSameNameRules(t *testing.T) {
	hs := newHosts(t, "h0", "h1")
	m, ev, _ := newManager(t)
	set := Settings{Copies: 2, Keep: 2}
	hosts := hostsOf(hs...)
	now := time.Now()
	hs[0].write(t, "step-5.pt", 500, now)
	hs[1].write(t, "step-5.pt", 500, now.Add(time.Second))
	watchOnce(t, m, hosts, set)
	require.Len(t, m.Record().Entries(), 1)
	assert.ElementsMatch(t, []string{"written:h0", "written:h1"}, holders(m, 1))
	require.NoError(t, m.replicate(context.Background(), 1, hosts, set))
	assert.NoDirExists(t, hs[0].Own, "two hosts hold it already")
	assert.NoDirExists(t, hs[1].Own)

	hs[0].write(t, "last.pt", 100, now)
	watchOnce(t, m, hosts, set)
	last := hs[0].write(t, "last.pt", 100, now.Add(time.Minute)) // saved again, same size
	watchOnce(t, m, hosts, set)
	es := m.Record().Entries()
	require.Len(t, es, 3)
	assert.Equal(t, []string{"step-5.pt", "last.pt", "last.pt"}, []string{es[0].Name, es[1].Name, es[2].Name})
	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	fileEq(t, last, paths["h1"])
	assert.Empty(t, holders(m, 2), "the first last.pt is gone: overwritten")
	t.Log(ev)
}

// TestRecordRerunSameName: a job run again from scratch with the same log
// directory (so the same record) saves a checkpoint under the name and
// size of one from the earlier run, which no host writes any more (held,
// if anywhere, only as drover's copy on a host outside the group). It is a
// new checkpoint and is copied, not taken for another holder of the old
// one. drover-bench's lost-host run saw no copy from its second run on.
func TestRecordRerunSameName(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2")
	m, ev, _ := newManager(t)
	set := Settings{Copies: 2, Keep: 2}
	now := time.Now()
	hs[0].write(t, "ck-1.bin", 300, now)
	watchOnce(t, m, hostsOf(hs...), set)
	require.NoError(t, m.replicate(context.Background(), 1, hostsOf(hs...), set))
	require.ElementsMatch(t, []string{"written:h0", "copy:h1"}, holders(m, 1))

	// The next run: h1 is now a spare outside the group, h0 starts afresh.
	require.NoError(t, os.RemoveAll(hs[0].Dir))
	group := hostsOf(hs[0], hs[2])
	paths, err := m.Stage(context.Background(), group, set)
	require.NoError(t, err)
	require.Nil(t, paths, "nothing of the group holds the old checkpoint")
	again := hs[0].write(t, "ck-1.bin", 300, now.Add(time.Minute))
	watchOnce(t, m, group, set)
	es := m.Record().Entries()
	require.Len(t, es, 2, "a new checkpoint: %s", ev)
	assert.Equal(t, []string{"copy:h1"}, holders(m, 1))
	require.NoError(t, m.replicate(context.Background(), 2, group, set))
	fileEq(t, again, hs[2].copyPath(2, "ck-1.bin"))
}
