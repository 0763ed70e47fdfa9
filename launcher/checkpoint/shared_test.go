package checkpoint

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A record written by one supervisor and read back by another (Shared,
// then AdoptShared on a machine with no record) has the same entries.
func TestSharedRecordRoundTrip(t *testing.T) {
	src, err := LoadRecord(filepath.Join(t.TempDir(), "a.json"), "job")
	require.NoError(t, err)
	require.NoError(t, src.update(func(d *recordFile) bool {
		d.Entries = []*Entry{
			{Seq: 1, Name: "step-20", Held: []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/step-20"}}},
			{Seq: 2, Name: "step-40", Digest: "abc", Held: []Location{
				{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/step-40"},
				{Kind: Copy, Host: "h1", Path: "/home/v/wd/.drover/checkpoints/2-step-40"}}},
		}
		d.Next = 3
		return true
	}))
	b, n, err := src.Shared()
	require.NoError(t, err)
	_, n2, _ := src.Shared()
	assert.Equal(t, n, n2, "no change, no new count")

	dst, err := LoadRecord(filepath.Join(t.TempDir(), "b.json"), "job")
	require.NoError(t, err)
	// Each host keeps the same copy; each is believed about its own
	// checkpoints only (issue 36): h0's, then h1's, make the whole.
	took, err := dst.AdoptShared(b, "h0", places())
	require.NoError(t, err)
	assert.True(t, took)
	took, err = dst.AdoptShared(b, "h1", places())
	require.NoError(t, err)
	assert.True(t, took, "h1's copy of step-40")
	assert.Equal(t, src.Entries(), dst.Entries())
	again, err := LoadRecord(dst.path, "job")
	require.NoError(t, err)
	assert.Equal(t, src.Entries(), again.Entries(), "saved on the adopting machine")

	took, err = dst.AdoptShared(b, "h1", places())
	require.NoError(t, err)
	assert.False(t, took, "a record that knows no more than ours is not taken")
}

// Issue 36, a weak point: a hostile host's copy of the record renumbers
// the checkpoints so that an older one is the newest (a silent rollback
// for every host). Only its own locations are taken from it, a number
// the record already gives another checkpoint is not taken (the error
// names the host), and a mirror copy of one checkpoint cannot stand for
// another: whichever order the hosts are read in, step-40 stays the
// newest checkpoint that has holders.
func TestSharedRecordNoRollback(t *testing.T) {
	honest := []*Entry{
		{Seq: 1, Name: "step-20", Held: []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/step-20"}, {Kind: Mirror, Path: "/ctl/mirror/000001/step-20"}}},
		{Seq: 2, Name: "step-40", Held: []Location{{Kind: Written, Host: "h1", Path: "/home/v/wd/ckpt/step-40"}, {Kind: Copy, Host: "h0", Path: "/home/u/wd/.drover/checkpoints/000002/step-40"}}},
	}
	hostile := []*Entry{
		{Seq: 1, Name: "step-40", Held: []Location{{Kind: Written, Host: "h1", Path: "/home/v/wd/ckpt/step-40"}}},
		{Seq: 2, Name: "step-20", Held: []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/step-20"}}},
		{Seq: 3, Name: "step-20", Held: []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/step-20"}, {Kind: Mirror, Path: "/ctl/mirror/000001/step-20"}}},
	}
	hb, err := json.Marshal(recordFile{Job: "job", Next: 3, Entries: honest})
	require.NoError(t, err)
	xb, err := json.Marshal(recordFile{Job: "job", Next: 4, Entries: hostile})
	require.NoError(t, err)
	newest := func(r *Record) string {
		es := r.Entries()
		for i := len(es) - 1; i >= 0; i-- {
			if len(es[i].Held) > 0 {
				return es[i].Name
			}
		}
		return ""
	}
	for _, hostileFirst := range []bool{false, true} {
		dst, err := LoadRecord(filepath.Join(t.TempDir(), "b.json"), "job")
		require.NoError(t, err)
		reads := []struct {
			b    []byte
			host string
		}{{hb, "h0"}, {xb, "h1"}}
		if hostileFirst {
			reads[0], reads[1] = reads[1], reads[0]
		}
		var errs []string
		for _, rd := range reads {
			if _, err := dst.AdoptShared(rd.b, rd.host, places()); err != nil {
				errs = append(errs, err.Error())
			}
		}
		assert.Equal(t, "step-40", newest(dst), "hostile first: %v: %+v", hostileFirst, dst.Entries())
		require.Len(t, errs, 1, "hostile first: %v", hostileFirst)
		assert.Contains(t, errs[0], "disagrees with the others on checkpoints")
		for _, e := range dst.Entries() {
			for _, l := range e.Held {
				assert.False(t, l.Kind == Mirror && e.Seq != 1, "the mirror's copy of #1 stands for #%d", e.Seq)
				assert.False(t, l.Host == "h0" && e.Name != "step-20" && l.Kind == Written, "h0's step-20 stands for %s", e.Name)
			}
		}
	}
}

func places() Places {
	return Places{Hosts: map[string][]string{
		"h0": {"/home/u/wd/ckpt", "/home/u/wd/.drover/checkpoints"},
		"h1": {"/home/v/wd/ckpt", "/home/v/wd/.drover/checkpoints"},
	}, Mirror: "/ctl/mirror"}
}

// A hostile host's record cannot point drover anywhere but the job's
// checkpoint directories: names a host must not give, paths outside them
// (on the host or on the controller, through the mirror), parts of hosts
// not in the job and entries out of order are dropped; a record of
// another job, or too large, is refused.
func TestSharedRecordFromHostileHost(t *testing.T) {
	entries := []*Entry{
		{Seq: 1, Name: "ok", Held: []Location{
			{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/ok"},
			{Kind: Written, Host: "h0", Path: "/home/u/.ssh"},
			{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/../../.ssh"},
			{Kind: Copy, Host: "h1", Path: "/home/u/wd/.drover/checkpoints/1-ok"},
			{Kind: Mirror, Path: "/ctl/mirror/1-ok"},
			{Kind: Mirror, Path: "/etc"},
			{Kind: Mirror, Path: "/ctl/mirror-other/x"},
			{Kind: "exec", Host: "h0", Path: "/home/u/wd/ckpt/ok"},
			{Kind: Copy, Host: "elsewhere", Path: "/home/u/wd/.drover/checkpoints/1-ok"},
			{Kind: Copy, Host: "h1", Path: "/home/v/wd/.drover/checkpoints/1-ok", Part: "stranger"},
		}},
		{Seq: 2, Name: "..", Held: []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt"}}},
		{Seq: 3, Name: "a/b", Held: []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/a/b"}}},
		{Seq: 1, Name: "again", Held: []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/again"}}},
		nil,
		{Seq: 5, Name: "sharded", Parts: []string{"h0", "stranger"}, Held: []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/sharded"}}},
	}
	b, err := json.Marshal(recordFile{Job: "job", Next: 9, Entries: entries})
	require.NoError(t, err)
	dst, err := LoadRecord(filepath.Join(t.TempDir(), "b.json"), "job")
	require.NoError(t, err)
	took, err := dst.AdoptShared(b, "h0", places())
	require.NoError(t, err)
	require.True(t, took)
	got := dst.Entries()
	require.Len(t, got, 2, "%+v", got)
	assert.Equal(t, "ok", got[0].Name)
	assert.Equal(t, []Location{{Kind: Written, Host: "h0", Path: "/home/u/wd/ckpt/ok"}, {Kind: Mirror, Path: "/ctl/mirror/1-ok"}}, got[0].Held)
	assert.Equal(t, "sharded", got[1].Name)
	assert.Empty(t, got[1].Held, "a part on a host outside the job: never whole")

	other, _ := json.Marshal(recordFile{Job: "someone-else\x1b[2J", Next: 2, Entries: entries[:1]})
	_, err = dst.AdoptShared(other, "h0", places())
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "\x1b")
	_, err = dst.AdoptShared([]byte(strings.Repeat(" ", MaxSharedRecord+1)), "h0", places())
	assert.ErrorContains(t, err, "more than")
	_, err = dst.AdoptShared([]byte("{"), "h0", places())
	assert.Error(t, err)
}
