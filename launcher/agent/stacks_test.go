//go:build linux

package agent

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hung group's Python processes print their stacks on "stacks", a frozen
// (SIGSTOPped) one included, and a frozen process stops on a graceful stop
// at once rather than only at SIGKILL after the grace.
func TestStacksAndFrozenProcesses(t *testing.T) {
	testenv.LookPath(t, "/usr/bin/python3")
	tests := []struct {
		name   string
		script string
		lines  []string
		want   int
		output []string
	}{
		{name: "stacks of a frozen python process",
			// Core files allowed: the SIGABRT must still leave none.
			script: `cd "$CORE_DIR"; ulimit -c unlimited 2>/dev/null; PYTHONFAULTHANDLER=1 exec /usr/bin/python3 -c '
import os, signal
def freeze():
    print("ready", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
freeze()
'`,
			lines: []string{"stacks"}, want: 128 + int(syscall.SIGABRT),
			output: []string{"asking Python process", "Fatal Python error: Aborted", `File "<string>", line 5 in freeze`}},
		{name: "python without faulthandler is left alone",
			script: `PYTHONFAULTHANDLER= exec /usr/bin/python3 -c '
import time
print("ready", flush=True)
time.sleep(1000)
'`,
			lines: []string{"stacks", "stop"}, want: 128 + int(syscall.SIGTERM),
			output: []string{"no stack for Python process"}},
		{name: "a frozen process stops on SIGTERM",
			script: `echo ready; kill -STOP $$; sleep 1000`,
			lines:  []string{"stop"}, want: 128 + int(syscall.SIGTERM)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("CORE_DIR", dir)
			r, w := io.Pipe()
			defer w.Close()
			var out capture
			res := runAsync(context.Background(), RunOptions{
				Args: []string{"sh", "-c", tt.script}, Grace: time.Minute,
				Stdin: r, Stdout: &out, Stderr: &out,
			})
			out.waitFor(t, "ready", 10*time.Second)
			time.Sleep(300 * time.Millisecond) // let it freeze
			for _, l := range tt.lines {
				io.WriteString(w, l+"\n")
				time.Sleep(500 * time.Millisecond)
			}
			// Well within the minute of grace: no SIGKILL was needed.
			got := await(t, res, 20*time.Second)
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.code != tt.want {
				t.Errorf("exit code %d, want %d; output:\n%s", got.code, tt.want, out.String())
			}
			if cores, _ := filepath.Glob(filepath.Join(dir, "core*")); len(cores) > 0 {
				t.Errorf("core files left: %v", cores)
			}
			for _, s := range tt.output {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
		})
	}
}

// TestStacksAsksRAS: with RAS set, `drover agent stacks` asks NCCL's RAS
// service there alongside the stacks (package nccldiag speaks the
// protocol; here a stand-in that answers it), and a port where nothing
// listens is NoRAS, which the hang verdict keeps quiet.
func TestStacksAsksRAS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r := bufio.NewReader(c)
			for _, answer := range []string{"SERVER PROTOCOL 2\n", "OK\n", "Errors\n======\nrank 4 is not responding\n"} {
				if _, err := r.ReadString('\n'); err != nil {
					break
				}
				io.WriteString(c, answer)
			}
			c.Close()
		}
	}()
	rep, err := Stacks(context.Background(), StacksOptions{Workdir: t.TempDir(), RAS: ln.Addr().String()})
	require.NoError(t, err)
	assert.Equal(t, "Errors\n======\nrank 4 is not responding", rep.RAS)
	assert.False(t, rep.NoRAS)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed.Close()
	rep, err = Stacks(context.Background(), StacksOptions{Workdir: t.TempDir(), RAS: closed.Addr().String()})
	require.NoError(t, err)
	assert.Empty(t, rep.RAS)
	assert.True(t, rep.NoRAS, rep.RASError)

	assert.Equal(t, []string{"drover", "agent", "stacks", "--workdir", "/w", "--ras", "127.0.0.1:28100"},
		StacksCommand("drover", StacksOptions{Workdir: "/w", RAS: "127.0.0.1:28100"}))
}
