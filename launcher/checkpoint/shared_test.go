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
	took, err := dst.AdoptShared(b, "h0", places())
	require.NoError(t, err)
	assert.True(t, took)
	assert.Equal(t, src.Entries(), dst.Entries())
	again, err := LoadRecord(dst.path, "job")
	require.NoError(t, err)
	assert.Equal(t, src.Entries(), again.Entries(), "saved on the adopting machine")

	took, err = dst.AdoptShared(b, "h1", places())
	require.NoError(t, err)
	assert.False(t, took, "a record that knows no more than ours is not taken")
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
