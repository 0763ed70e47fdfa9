package push

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(p, []byte(got), 0o644))
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run with -update to create it")
	assert.Equal(t, string(want), got)
}

func TestRenderProgressGolden(t *testing.T) {
	var many []Progress
	for i := range 12 {
		many = append(many, Progress{Host: fmt.Sprintf("node-%02d", i), Phase: PhaseUpload,
			FilesDone: i, FilesTotal: 20, BytesDone: int64(i) * 1_000_000, BytesTotal: 20_000_000})
	}
	cases := []struct {
		name    string
		hosts   []Progress
		elapsed time.Duration
	}{
		{"three hosts", []Progress{
			{Host: "h1", Phase: PhaseUpload, FilesDone: 2, FilesTotal: 5, BytesDone: 1_500_000, BytesTotal: 4_000_000},
			{Host: "h2 (10.0.0.12)", Phase: PhaseCompare},
			{Host: "h3", Phase: PhaseDone, FilesDone: 5, FilesTotal: 5, BytesDone: 4_000_000, BytesTotal: 4_000_000},
		}, 2 * time.Second},
		{"one failed", []Progress{
			{Host: "h1", Phase: PhaseFailed, FilesDone: 1, FilesTotal: 5, BytesDone: 1000, BytesTotal: 4_000_000},
			{Host: "h2", Phase: PhaseDone},
		}, time.Second},
		{"many hosts", many, 10 * time.Second},
		{"nothing yet", nil, 0},
	}
	var b strings.Builder
	for _, c := range cases {
		fmt.Fprintf(&b, "== %s\n", c.name)
		for _, l := range renderProgress(c.hosts, c.elapsed) {
			b.WriteString(l + "\n")
		}
	}
	golden(t, "progress.golden", b.String())
}

func TestSummaryGolden(t *testing.T) {
	var b strings.Builder
	for _, r := range []Result{
		{FilesSent: 3, BytesSent: 1_234_567, FilesUnchanged: 120, Duration: 400 * time.Millisecond},
		{FilesUnchanged: 120, Duration: 12 * time.Millisecond},
		{FilesSent: 1, BytesSent: 999, FilesDeleted: 2, Duration: 3 * time.Second},
	} {
		b.WriteString("h1: " + r.Summary() + "\n")
	}
	golden(t, "summary.golden", b.String())
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {999, "999 B"}, {1000, "1.0 kB"}, {1_234_567, "1.2 MB"}, {5_000_000_000, "5.0 GB"},
		{1 << 62, "4.6 EB"},
	} {
		assert.Equal(t, tc.want, FormatBytes(tc.n))
	}
}

func TestDisplay(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }

	var quiet bytes.Buffer
	d := newDisplay(&quiet, false, clock)
	d.Update(Progress{Host: "h1", Phase: PhaseUpload})
	d.Close()
	assert.Empty(t, quiet.String(), "a display off a terminal writes nothing")

	var out bytes.Buffer
	d = newDisplay(&out, true, clock)
	d.Update(Progress{Host: "h1", Phase: PhaseUpload, FilesTotal: 2})
	first := out.Len()
	assert.Contains(t, out.String(), "push: 0/1 hosts done")
	// Within the redraw interval further updates are recorded, not drawn.
	for i := range 100 {
		now = now.Add(time.Millisecond)
		d.Update(Progress{Host: "h1", Phase: PhaseUpload, FilesTotal: 2, BytesDone: int64(i)})
	}
	assert.Equal(t, first, out.Len(), "redrawn within %v", redrawEvery)
	now = now.Add(redrawEvery)
	d.Update(Progress{Host: "h1", Phase: PhaseDone, FilesDone: 2, FilesTotal: 2})
	assert.Contains(t, out.String()[first:], "\x1b[2A", "redraw moves up over the two lines drawn")
	assert.Contains(t, out.String()[first:], "push: 1/1 hosts done, 2/2 files")
	d.Close()
	assert.True(t, strings.HasSuffix(out.String(), "\x1b[1A\r\x1b[J"), "Close erases the block: %q", out.String())
}
