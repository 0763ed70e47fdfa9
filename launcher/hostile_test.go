package launcher

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/hostio"
)

// forged is what a hostile host puts in a checkpoint name or its output:
// a screen clear, then a line that looks like one of drover's events.
const forged = "step\x1b[2J\n12:00:00.000 resuming from checkpoint forged"

// TestEventLogEscapesHostText checks that an event quoting a host's text
// stays one line on the terminal and in events.log, with no escape
// sequence left in it.
func TestEventLogEscapesHostText(t *testing.T) {
	var term bytes.Buffer
	f, err := os.Create(filepath.Join(t.TempDir(), "events.log"))
	require.NoError(t, err)
	defer f.Close()
	e := &eventLog{w: &term, file: f, now: time.Now}
	e.printf("checkpoint %s (#%d) copied", forged, 3)
	e.debugf("listed %s", forged)
	logged, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	for what, out := range map[string]string{"terminal": term.String(), "events.log": string(logged)} {
		assert.NotContains(t, out, "\x1b", what)
		assert.Contains(t, out, `step\x1b[2J\n12:00:00.000 resuming`, what)
	}
	assert.Equal(t, 1, strings.Count(term.String(), "\n"), "one event, one line")
	assert.Equal(t, 2, strings.Count(string(logged), "\n"), "one event and one debug line")
}

// TestEventLogErrorLines: an error that covers several hosts (errors.Join)
// is an event with a line per host, the lines after the first indented so
// that none passes for an event or a process's line; a host's text in any
// of them (an argument, a line of the error) is still escaped.
func TestEventLogErrorLines(t *testing.T) {
	for _, tt := range []struct {
		name   string
		format string
		args   []any
		want   string
	}{
		{"joined error", "attempt %d/%d: %v", []any{1, 4, errors.Join(errors.New("preflight on a: no trainer"), errors.New("preflight on b: no trainer"))},
			"attempt 1/4: preflight on a: no trainer\n  preflight on b: no trainer"},
		{"host text in an error line", "%s: %v", []any{"attempt 1/4", errors.Join(errors.New("a: ok"), errors.New("b said "+forged))},
			`attempt 1/4: a: ok` + "\n" + `  b said step\x1b[2J` + "\n" + `  12:00:00.000 resuming from checkpoint forged`},
		{"host text in a string stays one line", "copied %s from %v in %s", []any{forged, hostName("h\n1"), 1500 * time.Millisecond},
			`copied step\x1b[2J\n12:00:00.000 resuming from checkpoint forged from h\n1 in 1.5s`},
		{"numbers keep their verbs", "%d bytes (%.1f%%) ok=%t", []any{int64(42), 12.34, true}, "42 bytes (12.3%) ok=true"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var term bytes.Buffer
			e := &eventLog{w: &term, now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }}
			e.printf(tt.format, tt.args...)
			assert.Equal(t, "03:04:05.000 "+tt.want+"\n", term.String())
			assert.NotContains(t, term.String(), "\x1b")
		})
	}
	var sum bytes.Buffer
	RenderSummary(&sum, &Result{Outcome: Failed, Attempts: 1, LogDir: "runs/x",
		Err: errors.Join(errors.New("push to a: "+forged), errors.New("push to b: disk full"))})
	assert.Equal(t, `failed after 1 attempt(s): push to a: step\x1b[2J`+"\n"+`  12:00:00.000 resuming from checkpoint forged`+"\n"+`  push to b: disk full; logs in runs/x`+"\n", sum.String())
}

// hostName is a name as a host gave it, printed through its String method.
type hostName string

func (h hostName) String() string { return string(h) }

// TestStopRequesterEscaped: who asked for a stop is read from a host (its
// stop-by file); the stopped run's summary prints it as one plain line.
func TestStopRequesterEscaped(t *testing.T) {
	var b bytes.Buffer
	RenderSummary(&b, &Result{Outcome: Interrupted, Attempts: 2, LogDir: "runs/x", Err: &hostio.StopRequest{By: forged}})
	assert.NotContains(t, b.String(), "\x1b")
	assert.Equal(t, `stopped by drover stop from step\x1b[2J\n12:00:00.000 resuming from checkpoint forged in attempt 2; logs in runs/x`+"\n", b.String())
}

// TestRootCauseEscaped: an error file or stderr holding escapes gives a
// cause that prints as one plain line.
func TestRootCauseEscaped(t *testing.T) {
	dir := t.TempDir()
	ef := filepath.Join(dir, "error.json")
	require.NoError(t, os.WriteFile(ef, []byte(`{"message": "RuntimeError: \u001b[2J boom"}`), 0o644))
	assert.Equal(t, `RuntimeError: \x1b[2J boom`, rootCause(cluster.NewOSFS(dir), ef, ""))
	assert.Equal(t, `stderr: \x1b]0;owned\a`, rootCause(nil, "", "\x1b]0;owned\a\n"))
}

// pathTransport runs every command with dir first in its PATH: a host
// whose `ip` is dir's.
type pathTransport struct {
	cluster.Transport
	dir string
}

func (p pathTransport) Start(ctx context.Context, cmd cluster.Cmd) (cluster.Process, error) {
	cmd.Env = map[string]string{"PATH": p.dir + ":" + os.Getenv("PATH")}
	return p.Transport.Start(ctx, cmd)
}

// TestDiscoverIfaceBounded: a host whose answer to the interface question
// is 8 MB on one line is left out after a few KiB, not read whole.
func TestDiscoverIfaceBounded(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ip"), []byte("#!/bin/sh\nprintf '1: '; head -c 8000000 /dev/zero | tr '\\0' x; echo ' inet'\n"), 0o755))
	local, err := cluster.NewLocal(cluster.Endpoint{Name: "h0", Transport: cluster.TransportLocal})
	require.NoError(t, err)
	defer local.Close()
	tr := pathTransport{local, dir}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := hostio.DiscoverIfaces(context.Background(), []cluster.Transport{tr}, "127.0.0.1")
	runtime.ReadMemStats(&after)
	assert.Empty(t, got)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4<<20), "the answer was read to its bound only")
}
