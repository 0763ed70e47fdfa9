package logstream

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingWriter records every Write separately, to prove lines arrive
// whole, one per Write.
type countingWriter struct {
	writes []string
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes = append(c.writes, string(p))
	return len(p), nil
}

func TestPrefixWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   []string // one entry per Write reaching the sink
	}{
		{"one line", []string{"hello\n"}, []string{"[h] hello\n"}},
		{"split mid-line", []string{"hel", "lo\nwor", "ld\n"}, []string{"[h] hello\n", "[h] world\n"}},
		{"several in one chunk", []string{"a\nb\nc\n"}, []string{"[h] a\n", "[h] b\n", "[h] c\n"}},
		{"partial flushed by close", []string{"a\nno newline"}, []string{"[h] a\n", "[h] no newline\n"}},
		{"empty lines kept", []string{"\n\nx\n"}, []string{"[h] \n", "[h] \n", "[h] x\n"}},
		{"carriage returns pass through", []string{"50%\r100%\n"}, []string{"[h] 50%\r100%\n"}},
		{"nothing", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cw countingWriter
			w := NewPrefixWriter(NewSink(&cw), "[h] ")
			for _, c := range tc.chunks {
				n, err := w.Write([]byte(c))
				require.NoError(t, err)
				assert.Equal(t, len(c), n)
			}
			require.NoError(t, w.Close())
			assert.Equal(t, tc.want, cw.writes)
		})
	}
}

func TestWriteAfterClose(t *testing.T) {
	w := NewPrefixWriter(NewSink(&bytes.Buffer{}), "")
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close is idempotent")
	_, err := w.Write([]byte("x\n"))
	assert.ErrorIs(t, err, ErrClosed)
}

func TestOverlongLine(t *testing.T) {
	var cw countingWriter
	w := NewPrefixWriter(NewSink(&cw), "> ")
	long := strings.Repeat("x", 2*MaxLine+10)
	// Written byte-ish chunks so the split happens while buffering.
	for i := 0; i < len(long); i += 1000 {
		_, err := w.Write([]byte(long[i:min(i+1000, len(long))]))
		require.NoError(t, err)
	}
	_, err := w.Write([]byte("\n"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.Len(t, cw.writes, 3)
	assert.Equal(t, "> "+strings.Repeat("x", MaxLine)+"\n", cw.writes[0])
	assert.Equal(t, "> "+strings.Repeat("x", MaxLine)+"\n", cw.writes[1])
	assert.Equal(t, "> "+strings.Repeat("x", 10)+"\n", cw.writes[2])

	// Exactly MaxLine bytes then a newline is one line, not two.
	cw.writes = nil
	w = NewPrefixWriter(NewSink(&cw), "")
	_, err = w.Write([]byte(strings.Repeat("y", MaxLine)))
	require.NoError(t, err)
	_, err = w.Write([]byte("\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{strings.Repeat("y", MaxLine) + "\n"}, cw.writes)
}

func TestTeeWriter(t *testing.T) {
	var term, log bytes.Buffer
	w := NewTeeWriter(NewSink(&term), "[h1] ", &log)
	_, err := w.Write([]byte("step 1\nstep"))
	require.NoError(t, err)
	_, err = w.Write([]byte(" 2\ncrash"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	assert.Equal(t, "[h1] step 1\n[h1] step 2\n[h1] crash\n", term.String())
	assert.Equal(t, "step 1\nstep 2\ncrash\n", log.String())
}

// TestConcurrentWritersNeverInterleave has many streams write random-sized
// chunks at once into one sink; every line must come out whole, with its
// own prefix, and each stream's lines in order.
func TestConcurrentWritersNeverInterleave(t *testing.T) {
	const streams, lines = 16, 300
	var out bytes.Buffer
	sink := NewSink(&out)
	var wg sync.WaitGroup
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := NewPrefixWriter(sink, fmt.Sprintf("[h%d] ", s))
			var all bytes.Buffer
			for l := range lines {
				fmt.Fprintf(&all, "stream %d line %d %s\n", s, l, strings.Repeat("z", l%50))
			}
			data := all.Bytes()
			rng := rand.New(rand.NewPCG(uint64(s), 1))
			for len(data) > 0 {
				n := min(1+rng.IntN(40), len(data))
				_, err := w.Write(data[:n])
				assert.NoError(t, err)
				data = data[n:]
			}
			assert.NoError(t, w.Close())
		}()
	}
	wg.Wait()
	next := make([]int, streams)
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var s, s2, l int
		var z string
		_, err := fmt.Sscanf(line, "[h%d] stream %d line %d %s", &s, &s2, &l, &z)
		if l%50 == 0 {
			_, err = fmt.Sscanf(line, "[h%d] stream %d line %d", &s, &s2, &l)
		}
		require.NoError(t, err, "mangled line %q", line)
		require.Equal(t, s, s2, "line %q carries another stream's prefix", line)
		require.Equal(t, next[s], l, "stream %d out of order at %q", s, line)
		require.Equal(t, strings.Repeat("z", l%50), z, "line %q", line)
		next[s]++
	}
	for s, n := range next {
		assert.Equal(t, lines, n, "stream %d", s)
	}
}

// TestOverlongLineWholeInLogFile is issue 21 item 11: a log file (no
// prefix) gets a line longer than MaxLine exactly as printed, with no
// newline inserted, while memory stays bounded by writing it in pieces.
func TestOverlongLineWholeInLogFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"just over", MaxLine + 1},
		{"three pieces and a bit", 3*MaxLine + 17},
		{"a megabyte", 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := NewPrefixWriter(NewSink(&out), "")
			long := strings.Repeat("0123456789", tc.size/10+1)[:tc.size]
			data := "before\n" + long + "\nafter\n"
			for i := 0; i < len(data); i += 1000 {
				_, err := w.Write([]byte(data[i:min(i+1000, len(data))]))
				require.NoError(t, err)
			}
			require.NoError(t, w.Close())
			assert.True(t, data == out.String(), "got lines of lengths %v, want %v", lineLengths(out.String()), lineLengths(data))
			assert.LessOrEqual(t, cap(w.(*LineWriter).buf), 2*MaxLine+1000, "the line was buffered in pieces")
		})
	}
}

// TestOverlongLineSharedLogFile: stdout and stderr of one process share
// its log file. A line the other stream completes while an overlong line
// is half written waits for it, so both stay whole; a second overlong
// line started meanwhile ends the first one (the only newline a log file
// ever gets that the process did not print).
func TestOverlongLineSharedLogFile(t *testing.T) {
	var out bytes.Buffer
	sink := NewSink(&out)
	stdout, stderr := NewPrefixWriter(sink, ""), NewPrefixWriter(sink, "")
	long := strings.Repeat("a", 2*MaxLine+5)
	write := func(w io.Writer, s string) {
		t.Helper()
		_, err := w.Write([]byte(s))
		require.NoError(t, err)
	}
	write(stdout, long[:MaxLine+10]) // one piece out, the line stays open
	write(stderr, "warning 1\nwarning 2\n")
	write(stdout, long[MaxLine+10:]+"\n")
	assert.Equal(t, long+"\nwarning 1\nwarning 2\n", out.String())

	out.Reset()
	write(stdout, long) // open again
	write(stderr, strings.Repeat("b", MaxLine+1))
	require.NoError(t, stdout.Close())
	require.NoError(t, stderr.Close())
	// The a line was ended where the b line began; its rest is a line of
	// its own once b's ends. No byte is lost.
	want := []string{strings.Repeat("a", 2*MaxLine), strings.Repeat("b", MaxLine+1), "aaaaa"}
	assert.True(t, strings.Join(want, "\n")+"\n" == out.String(), "got lines of lengths %v", lineLengths(out.String()))
}

func lineLengths(s string) []int {
	var n []int
	for _, l := range strings.Split(s, "\n") {
		n = append(n, len(l))
	}
	return n
}
