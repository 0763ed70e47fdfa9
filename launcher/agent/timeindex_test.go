package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeAt appends text to the log through lw as if written at t.
func writeAt(t *testing.T, lw *lockedWriter, at time.Time, text string) {
	t.Helper()
	lw.ix.before(at)
	n, err := lw.w.Write([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	lw.ix.size += int64(n)
}

func newIndexedLog(t *testing.T) (string, *lockedWriter) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "worker-0.log")
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ix := newTimeIndex(log, 0)
	t.Cleanup(func() { f.Close(); ix.close() })
	return log, &lockedWriter{w: f, ix: ix}
}

// TestSinceOffsetCutsBetweenBatches: a cut after the first batch's
// segment is over starts exactly at the second batch; a cut inside a
// segment keeps that whole segment (never loses a newer line); a cut
// before everything is the whole log, after everything its end.
func TestSinceOffsetCutsBetweenBatches(t *testing.T) {
	log, lw := newIndexedLog(t)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	writeAt(t, lw, t0, "a1\na2\n")
	writeAt(t, lw, t0.Add(300*time.Millisecond), "a3\n")
	writeAt(t, lw, t0.Add(5*time.Second), "b1\nb")
	writeAt(t, lw, t0.Add(5500*time.Millisecond), "2\n")
	first := int64(len("a1\na2\na3\n"))
	for _, c := range []struct {
		name string
		at   time.Time
		want int64
	}{
		{"before everything", t0.Add(-time.Hour), 0},
		{"inside the first segment", t0.Add(500 * time.Millisecond), 0},
		{"between the batches", t0.Add(2 * time.Second), first},
		{"inside the second segment", t0.Add(5200 * time.Millisecond), first},
		{"after everything", t0.Add(time.Hour), first + int64(len("b1\nb2\n"))},
	} {
		got := SinceOffset(log, c.at)
		if !got.Indexed || got.Error != "" || got.Offset != c.want {
			t.Errorf("%s: SinceOffset = %+v, want offset %d", c.name, got, c.want)
		}
	}
}

// TestSinceOffsetLineStart: a segment that starts mid-line (a write ended
// inside one) is cut at the start of that line.
func TestSinceOffsetLineStart(t *testing.T) {
	log, lw := newIndexedLog(t)
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	writeAt(t, lw, t0, "old\nhalf")
	writeAt(t, lw, t0.Add(3*time.Second), " a line\nnew\n")
	got := SinceOffset(log, t0.Add(2*time.Second))
	if got.Offset != int64(len("old\n")) {
		t.Fatalf("SinceOffset = %+v, want the start of the half line (%d)", got, len("old\n"))
	}
}

// TestTimeIndexThins: past its limit the index merges segments pairwise
// and doubles its resolution; it stays bounded and still never cuts a
// newer line off.
func TestTimeIndexThins(t *testing.T) {
	log, lw := newIndexedLog(t)
	lw.ix.max = 8
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for i := range 100 {
		writeAt(t, lw, t0.Add(time.Duration(i)*time.Second), "line\n")
	}
	segs, err := readTimeIndex(log + TimeIndexSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) > 8 || len(segs) < 2 {
		t.Fatalf("index has %d lines, want 2..8", len(segs))
	}
	if lw.ix.res <= timeIndexRes {
		t.Errorf("resolution %s after thinning, want more than %s", lw.ix.res, timeIndexRes)
	}
	for i := range 100 {
		at := t0.Add(time.Duration(i)*time.Second + 500*time.Millisecond)
		got := SinceOffset(log, at)
		// Line i+1 on was written after at: it must be in what is printed.
		if got.Offset > int64(i+1)*5 {
			t.Fatalf("cut at line %d.5: offset %d skips line %d", i, got.Offset, i+1)
		}
	}
}

// TestSinceOffsetNoIndex: a log an older agent wrote has no index; it is
// reported as such, from its start.
func TestSinceOffsetNoIndex(t *testing.T) {
	log := filepath.Join(t.TempDir(), "worker-0.log")
	if err := os.WriteFile(log, []byte(strings.Repeat("x\n", 10)), 0o600); err != nil {
		t.Fatal(err)
	}
	got := SinceOffset(log, time.Now())
	if got.Indexed || got.Offset != 0 || got.Size != 20 {
		t.Fatalf("SinceOffset = %+v, want not indexed, offset 0, size 20", got)
	}
}

// TestCurrentTimeout: the controller timeout an attach client set wins
// over the one the agent started with; none, or one it cannot read,
// leaves that.
func TestCurrentTimeout(t *testing.T) {
	state := filepath.Join(t.TempDir(), "worker-0.json")
	if got := currentTimeout(state, time.Hour); got != time.Hour {
		t.Errorf("no file: %s, want 1h", got)
	}
	for text, want := range map[string]time.Duration{"6s\n": 6 * time.Second, "0s\n": 0, "soon\n": time.Hour} {
		if err := os.WriteFile(timeoutFile(state), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := currentTimeout(state, time.Hour); got != want {
			t.Errorf("file %q: %s, want %s", text, got, want)
		}
	}
}
