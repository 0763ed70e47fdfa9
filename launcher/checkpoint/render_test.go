package checkpoint

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestRender(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 6, 0, 1, 0, time.UTC)
	entries := []Entry{
		{Seq: 1, Name: "step-000010.pt", Size: 1234, Seen: t0, Held: []Location{{Kind: Written, Host: "gpu-a", Path: "/x"}}},
		{Seq: 2, Name: "step-000020.pt", Size: 120 << 20, Seen: t0.Add(time.Minute), Held: []Location{
			{Kind: Written, Host: "gpu-a", Path: "/x"}, {Kind: Copy, Host: "gpu-b", Path: "/y"}, {Kind: Mirror, Path: "/z"}}},
		{Seq: 3, Name: "gone.pt", Size: 1, Seen: t0.Add(2 * time.Minute)},
	}
	var b bytes.Buffer
	require.NoError(t, Render(&b, entries, time.UTC))
	golden := filepath.Join("testdata", "checkpoints.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, b.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), b.String())

	b.Reset()
	require.NoError(t, Render(&b, nil, time.UTC))
	assert.Contains(t, b.String(), "no checkpoints recorded yet")
}

// A checkpoint is restorable when some place holds it and, sharded, every
// part; the listing shows only those unless asked for the history.
func TestRestorableListing(t *testing.T) {
	held := []Location{{Kind: Written, Host: "a", Path: "/x"}}
	for _, tt := range []struct {
		name string
		e    Entry
		want bool
	}{
		{"held", Entry{Held: held}, true},
		{"held nowhere", Entry{}, false},
		{"every part held", Entry{Parts: []string{"a", "b"}, Held: append(slices.Clone(held), Location{Kind: Copy, Host: "c", Part: "b"})}, true},
		{"a part lost", Entry{Parts: []string{"a", "b"}, Held: held}, false},
	} {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, Restorable(tt.e)) })
	}
	for _, tt := range []struct {
		name string
		e    Entry
		want bool
	}{
		{"written only on the host", Entry{Held: held}, false},
		{"written there, drover's copy elsewhere", Entry{Held: append(slices.Clone(held), Location{Kind: Copy, Host: "b", Path: "/c"})}, true},
		{"written there and on another host", Entry{Held: append(slices.Clone(held), Location{Kind: Written, Host: "b", Path: "/x"})}, true},
		{"written there, in the mirror", Entry{Held: append(slices.Clone(held), Location{Kind: Mirror, Path: "/m"})}, true},
		{"written there, drover's copy there too", Entry{Held: append(slices.Clone(held), Location{Kind: Copy, Host: "a", Path: "/c"})}, false},
		{"written elsewhere", Entry{Held: []Location{{Kind: Written, Host: "b", Path: "/x"}}}, true},
		{"sharded, the host's part copied", Entry{Parts: []string{"a", "b"}, Held: []Location{
			{Kind: Written, Host: "a"}, {Kind: Written, Host: "b"}, {Kind: Copy, Host: "b", Part: "a"}}}, true},
		{"sharded, the host's part only there", Entry{Parts: []string{"a", "b"}, Held: []Location{
			{Kind: Written, Host: "a"}, {Kind: Written, Host: "b"}, {Kind: Copy, Host: "a", Part: "b"}}}, false},
	} {
		t.Run("without a: "+tt.name, func(t *testing.T) { assert.Equal(t, tt.want, RestorableWithout(tt.e, "a")) })
	}
	copied := Entry{Seq: 1, Name: "step-10", Held: []Location{{Kind: Written, Host: "a"}, {Kind: Copy, Host: "b"}}}
	onlyA := Entry{Seq: 2, Name: "step-20", Held: held}
	e, ok := NewestWithout([]Entry{copied, onlyA}, "a")
	assert.True(t, ok)
	assert.Equal(t, "step-10", e.Name, "step-20 is held only on a")
	e, ok = NewestWithout([]Entry{copied, onlyA}, "b")
	assert.True(t, ok)
	assert.Equal(t, "step-20", e.Name)
	_, ok = NewestWithout([]Entry{onlyA}, "a")
	assert.False(t, ok)
	t0 := time.Date(2026, 11, 24, 6, 0, 1, 0, time.UTC)
	entries := []Entry{{Seq: 1, Name: "old.pt", Seen: t0}, {Seq: 2, Name: "new.pt", Seen: t0, Held: held}}
	var b bytes.Buffer
	require.NoError(t, RenderListing(&b, entries, false, time.UTC))
	assert.NotContains(t, b.String(), "old.pt")
	assert.Contains(t, b.String(), "new.pt")
	assert.Contains(t, b.String(), "1 more recorded checkpoint(s) can no longer be restored (--all lists them)")
	b.Reset()
	require.NoError(t, RenderListing(&b, entries, true, time.UTC))
	assert.Contains(t, b.String(), "old.pt")
	assert.NotContains(t, b.String(), "--all")
}
