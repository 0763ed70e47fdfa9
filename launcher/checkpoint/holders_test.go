package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
)

// countingFS counts the listings of one directory: a Watcher's polls.
type countingFS struct {
	cluster.FS
	dir   string
	lists atomic.Int64
}

func (c *countingFS) ReadDir(p string) ([]os.FileInfo, error) {
	if p == c.dir {
		c.lists.Add(1)
	}
	return c.FS.ReadDir(p)
}

// writeShard saves a directory checkpoint as sharded training does: this
// host's own part, then the marker.
func (h testHost) writeShard(t *testing.T, name, part string) {
	t.Helper()
	dir := filepath.Join(h.Dir, name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shard.bin"), []byte(part), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "DONE"), nil, 0o644))
}

// TestSameNameOnSeveralHostsIsOneCheckpoint: h0 and h1 each save their
// own shard of step-10 under the same name. Over many polls the record
// keeps one entry held by both (it used to flip between two new entries
// at every poll, each copied), one copy runs (to h2, the third holder
// checkpoint_copies asks for), and at a restart each writer resumes from
// its own directory, not the other's.
func TestSameNameOnSeveralHostsIsOneCheckpoint(t *testing.T) {
	hs := newHosts(t, "h0", "h1", "h2")
	m, ev, _ := newManager(t)
	set := Settings{Marker: "DONE", Copies: 3, Keep: 2, PollEvery: 5 * time.Millisecond}
	hosts := hostsOf(hs...)
	polls := &countingFS{FS: hosts[0].FS, dir: hosts[0].Dir}
	hosts[0].FS = polls
	hs[0].writeShard(t, "step-10", "part of h0")
	hs[1].writeShard(t, "step-10", "part of h1, longer")

	stop := m.Watch(context.Background(), hosts, set)
	eventually(t, "step-10 copied to h2", func() bool { return len(holders(m, 1)) == 3 })
	after := polls.lists.Load()
	eventually(t, "ten more polls", func() bool { return polls.lists.Load() >= after+10 })
	stop()
	t.Log(ev)

	es := m.Record().Entries()
	require.Len(t, es, 1, "one checkpoint, however many polls saw it")
	assert.ElementsMatch(t, []string{"written:h0", "written:h1", "copy:h2"}, holders(m, 1))
	assert.Equal(t, 1, strings.Count(ev.String(), " copied from "), "one copy for the whole run")

	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(hs[0].Dir, "step-10"), paths["h0"], "h0 resumes from its own shard")
	assert.Equal(t, filepath.Join(hs[1].Dir, "step-10"), paths["h1"], "h1 resumes from its own shard")
	fileEq(t, []byte("part of h0"), filepath.Join(paths["h0"], "shard.bin"))
	fileEq(t, []byte("part of h1, longer"), filepath.Join(paths["h1"], "shard.bin"))
	assert.Equal(t, hs[2].copyPath(1, "step-10"), paths["h2"])
}

// TestRecordMatchingIsLinear: a checkpoint_dir of 60,000 entries, listed
// at every poll, costs work linear in the entries (it was their square:
// 24 s of CPU per poll). Counted, not timed.
func TestRecordMatchingIsLinear(t *testing.T) {
	rec, err := LoadRecord(RecordPath(t.TempDir(), "job"), "job")
	require.NoError(t, err)
	const n = 60000
	found := make([]Found, n)
	for i := range found {
		name := fmt.Sprintf("step-%06d.pt", i)
		found[i] = Found{Host: "h0", Name: name, Path: "/ck/" + name, Size: 10, Stamp: fmt.Sprint(i)}
	}
	added, err := rec.Saw(found, time.Now())
	require.NoError(t, err)
	require.Len(t, added, n)
	for range 3 { // the next polls: nothing new
		added, err = rec.Saw(found, time.Now())
		require.NoError(t, err)
		require.Empty(t, added)
	}
	assert.LessOrEqual(t, rec.work, 4*2*n, "entries looked at for 4 polls of %d entries", n)
}

// TestFleetSameNameOnSeveralHosts is TestSameNameOnSeveralHostsIsOneCheckpoint
// over SSH: h0 and h1 save their shards of step-10 from inside the hosts.
func TestFleetSameNameOnSeveralHosts(t *testing.T) {
	fleettest.Need(t, fleet)
	hosts := fleetHosts(t)
	m, ev, _ := newManager(t)
	set := Settings{Marker: "DONE", Copies: 3, Keep: 2, PollEvery: 20 * time.Millisecond}
	polls := &countingFS{FS: hosts[0].FS, dir: hosts[0].Dir}
	hosts[0].FS = polls
	for i := range 2 {
		require.NoError(t, hosts[i].FS.MkdirAll(hosts[i].Dir, 0o755)) // as the login user
		dir := path.Join(hosts[i].Dir, "step-10")
		script := fmt.Sprintf(`set -e; mkdir %[1]q; head -c %[2]d /dev/urandom > %[1]q/shard.bin; touch %[1]q/DONE; chown -R %[3]s %[1]q`,
			dir, 1000*(i+1), fleettest.User)
		out, err := fleet.Exec(i, "sh", "-c", script)
		require.NoError(t, err, "%s", out)
	}
	stop := m.Watch(context.Background(), hosts, set)
	eventually(t, "step-10 copied to h2", func() bool { return len(holders(m, 1)) == 3 })
	after := polls.lists.Load()
	eventually(t, "ten more polls", func() bool { return polls.lists.Load() >= after+10 })
	stop()
	t.Log(ev)
	require.Len(t, m.Record().Entries(), 1, "one checkpoint, however many polls saw it")
	assert.Equal(t, 1, strings.Count(ev.String(), " copied from "), "one copy for the whole run")

	paths, err := m.Stage(context.Background(), hosts, set)
	require.NoError(t, err)
	for i := range 2 {
		own := path.Join(hosts[i].Dir, "step-10")
		assert.Equal(t, own, paths[hosts[i].Name], "%s resumes from its own shard", hosts[i].Name)
		assert.Equal(t, sumOn(t, i, path.Join(own, "shard.bin")), sumOn(t, i, path.Join(paths[hosts[i].Name], "shard.bin")))
	}
}
