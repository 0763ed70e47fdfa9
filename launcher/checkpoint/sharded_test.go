package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writePart saves host i's part of sharded checkpoint name as DCP does:
// its shard, and with marker, the coordinator's .metadata last.
func writePart(t *testing.T, h testHost, i int, name string, marker bool) map[string][]byte {
	t.Helper()
	dir := filepath.Join(h.Dir, name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	out := map[string][]byte{}
	files := []string{fmt.Sprintf("__%d_0.distcp", i)}
	if marker {
		files = append(files, ".metadata")
	}
	for _, f := range files {
		b := []byte(fmt.Sprintf("%s of %s by %s", f, name, h.Name))
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
		out[f] = b
	}
	return out
}

func sharded(copies int) Settings {
	return Settings{Copies: copies, Keep: 3, Marker: ".metadata", Layout: LayoutSharded, PollEvery: 10 * time.Millisecond}
}

// A sharded checkpoint is recorded only once the coordinator's marker is
// there, with every host's part; each part is copied to the next host;
// after a host is lost, the newest checkpoint whose every part is still
// held somewhere is staged onto the new group (the spare included) as
// the union of all parts, and one with a part lost is never chosen.
func TestShardedStageUnion(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2", "h3")
	m, ev, _ := newManager(t)
	stop := m.Watch(context.Background(), hostsOf(hs[0], hs[1], hs[2]), sharded(2))
	want := map[string][]byte{}
	for i := 2; i >= 0; i-- {
		for k, v := range writePart(t, hs[i], i, "step-10", i == 0) {
			want[k] = v
		}
	}
	eventually(t, "every part copied once", func() bool { return len(holders(m, 1)) == 6 })
	stop()
	assert.Equal(t, []string{"h0", "h1", "h2"}, m.Record().Entries()[0].Parts)

	stop = m.Watch(context.Background(), hostsOf(hs[0], hs[1], hs[2]), sharded(1))
	writePart(t, hs[1], 1, "step-30", false) // no marker yet: not a checkpoint
	for i := 2; i >= 0; i-- {
		writePart(t, hs[i], i, "step-20", i == 0)
	}
	eventually(t, "step-20 seen", func() bool { return len(m.Record().Entries()) == 2 && len(holders(m, 2)) == 3 })
	stop()
	require.Len(t, m.Record().Entries(), 2, "step-30 has no marker")

	group := hostsOf(hs[0], hs[1], hs[3])
	paths, err := m.Stage(context.Background(), group, sharded(2))
	require.NoError(t, err)
	t.Log(ev)
	assert.Contains(t, ev.String(), "checkpoint step-20 (#2) is not resumed from: no host of the group holds the part h2 wrote")
	for _, h := range []testHost{hs[0], hs[1], hs[3]} {
		require.Equal(t, filepath.Join(h.Own, seqDir(1), "step-10"), paths[h.Name])
		for f, b := range want {
			fileEq(t, b, filepath.Join(paths[h.Name], f))
		}
	}
	// The union is links: a stage again replaces them without touching
	// what they point to.
	_, err = m.Stage(context.Background(), group, sharded(2))
	require.NoError(t, err)
	fileEq(t, want["__0_0.distcp"], filepath.Join(hs[0].Dir, "step-10", "__0_0.distcp"))
	var b strings.Builder
	require.NoError(t, Render(&b, m.Record().Entries(), time.UTC))
	assert.Contains(t, b.String(), "h0 (copy of h2's part)")
	assert.Contains(t, b.String(), "3 parts, each held: recoverable")
}

// A sharded checkpoint first seen while a host of the group cannot be
// listed (lost as the checkpoint appeared) lacks that host's part: it is
// never resumed from, the complete one before it is. Without the rule the
// record listed only the parts it saw, and the ranks of the next attempt
// loaded a partial state ("Missing key(s) in state_dict").
func TestShardedSeenWithoutAHostIsNotComplete(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2", "h3")
	m, ev, _ := newManager(t)
	group := hostsOf(hs[0], hs[1], hs[2])
	stop := m.Watch(context.Background(), group, sharded(2))
	for i := 2; i >= 0; i-- {
		writePart(t, hs[i], i, "step-10", i == 0)
	}
	eventually(t, "every part of step-10 copied once", func() bool { return len(holders(m, 1)) == 6 })
	stop()

	// h1 can no longer be listed: its checkpoint_dir is now a file.
	require.NoError(t, os.Rename(hs[1].Dir, hs[1].Dir+".gone"))
	require.NoError(t, os.WriteFile(hs[1].Dir, []byte("x"), 0o644))
	stop = m.Watch(context.Background(), group, sharded(2))
	for _, i := range []int{2, 0} {
		writePart(t, hs[i], i, "step-20", i == 0)
	}
	eventually(t, "step-20 seen", func() bool { return len(m.Record().Entries()) == 2 })
	stop()
	assert.Equal(t, []string{"h0", "h1", "h2"}, m.Record().Entries()[1].Parts, "h1's part is expected though drover never saw it")

	paths, err := m.Stage(context.Background(), hostsOf(hs[0], hs[2], hs[3]), sharded(2))
	require.NoError(t, err)
	assert.Contains(t, ev.String(), "checkpoint step-20 (#2) is not resumed from: no host of the group holds the part h1 wrote")
	for _, h := range []testHost{hs[0], hs[2], hs[3]} {
		assert.Equal(t, filepath.Join(h.Own, seqDir(1), "step-10"), paths[h.Name])
	}
}
