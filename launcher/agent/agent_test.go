//go:build linux

package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

var fleet *fleettest.Fleet

func TestMain(m *testing.M) {
	os.Exit(fleettest.Main(m, fleettest.Options{Name: "ag", N: 2, Subnet: 16}, &fleet))
}

// capture is a concurrency-safe writer whose contents tests can wait on.
type capture struct{ transporttest.SyncBuffer }

// waitFor waits until the output contains s and returns the output.
func (c *capture) waitFor(t *testing.T, s string, within time.Duration) string {
	t.Helper()
	var out string
	testenv.Wait(t, within, fmt.Sprintf("output containing %q", s), func() (bool, string) {
		out = c.String()
		return strings.Contains(out, s), "\n" + out
	})
	return out
}

// pidsIn returns the integers printed as "pid N" lines.
func pidsIn(out string) []int {
	var pids []int
	for _, m := range regexp.MustCompile(`(?m)^pid (\d+)$`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		pids = append(pids, n)
	}
	return pids
}

// gone reports whether pid no longer runs (a zombie no longer runs: init
// does not always reap in containers).
func gone(pid int) bool {
	p, ok := readStat(pid)
	return !ok || p.dead()
}

func assertGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	testenv.Wait(t, within, fmt.Sprintf("processes %v to be gone", pids), func() (bool, string) {
		var alive []int
		for _, p := range pids {
			if !gone(p) {
				alive = append(alive, p)
			}
		}
		return len(alive) == 0, fmt.Sprintf("%v still running", alive)
	})
}

type result struct {
	code    int
	err     error
	elapsed time.Duration
}

// runAsync runs Run in the background and returns its result channel.
func runAsync(ctx context.Context, opts RunOptions) <-chan result {
	ch := make(chan result, 1)
	start := time.Now()
	go func() {
		code, err := Run(ctx, opts)
		ch <- result{code, err, time.Since(start)}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("agent did not finish within %s", within)
		return result{}
	}
}

func TestExitStatusPassesThrough(t *testing.T) {
	tests := []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 3", 3},
		{"kill -KILL $$", 137},
		{"kill -TERM $$", 143},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			t.Parallel()
			code, err := Run(context.Background(), RunOptions{Args: []string{"sh", "-c", tt.script}})
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.want {
				t.Errorf("exit code %d, want %d", code, tt.want)
			}
		})
	}
}

// An agent on the channel with a Record keeps its process's end on the
// host, written before it returns (so before sshd reports the exit): the
// record drover reads when the channel closed without the exit status.
func TestRecordKeepsTheExit(t *testing.T) {
	for _, tt := range []struct {
		args  []string
		state ProcState
		want  int
	}{
		{[]string{"sh", "-c", "exit 0"}, ProcExited, 0},
		{[]string{"sh", "-c", "exit 3"}, ProcExited, 3},
		{[]string{"/nonexistent/cmd"}, ProcFailed, ExitNotFound},
	} {
		t.Run(tt.args[len(tt.args)-1], func(t *testing.T) {
			rec := filepath.Join(t.TempDir(), "runs", "r1", "attempt-2", "worker-3.json")
			code, _ := Run(context.Background(), RunOptions{Args: tt.args, Record: rec, RunID: "r1", Attempt: 2, Rank: 3, Name: "worker-3"})
			require.Equal(t, tt.want, code)
			st, err := ReadState(rec)
			require.NoError(t, err)
			assert.Equal(t, tt.state, st.State)
			require.NotNil(t, st.Exit)
			assert.Equal(t, tt.want, *st.Exit)
			assert.Equal(t, "r1", st.RunID)
			assert.Equal(t, 2, st.Attempt)
			assert.Equal(t, "worker-3", st.Name)
		})
	}
}

func TestStartFailures(t *testing.T) {
	noexec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"not on PATH", []string{"drover-no-such-program"}, ExitNotFound},
		{"missing path", []string{"/nonexistent/prog"}, ExitNotFound},
		{"not executable", []string{noexec}, ExitCannotRun},
		{"empty", nil, ExitCannotRun},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, err := Run(context.Background(), RunOptions{Args: tt.args})
			if err == nil {
				t.Fatal("no error")
			}
			if code != tt.want {
				t.Errorf("exit code %d, want %d (err %v)", code, tt.want, err)
			}
		})
	}
}

func TestOutputCopiedUnchangedAndLogged(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "logs", "job.log")
	const script = `i=0; while [ $i -lt 200 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done; printf 'no newline'`
	var stdout, stderr capture
	code, err := Run(context.Background(), RunOptions{
		Args: []string{"sh", "-c", script}, LogFile: logPath, Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil || code != 0 {
		t.Fatalf("Run: code %d, err %v", code, err)
	}
	var wantOut, wantErr strings.Builder
	for i := range 200 {
		fmt.Fprintf(&wantOut, "out %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	wantOut.WriteString("no newline")
	if stdout.String() != wantOut.String() {
		t.Errorf("stdout differs from the command's:\n%q", stdout.String())
	}
	if stderr.String() != wantErr.String() {
		t.Errorf("stderr differs from the command's:\n%q", stderr.String())
	}
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != wantOut.Len()+wantErr.Len() {
		t.Errorf("log has %d bytes, want %d (every byte of both streams)", len(log), wantOut.Len()+wantErr.Len())
	}
	for _, line := range strings.Split(wantOut.String()+"\n"+wantErr.String(), "\n") {
		if !bytes.Contains(log, []byte(line)) {
			t.Errorf("log lacks %q", line)
		}
	}
}

// The stop tests start a shell that puts two grandchildren in the group,
// prints their pids, says "ready" and waits; traps make it ignore SIGTERM.
func TestStopRequests(t *testing.T) {
	const group = `sleep 1000 & echo "pid $!"; sleep 1000 & echo "pid $!"; echo "pid $$"; echo ready; wait; wait`
	const deaf = `trap "" TERM; ` + group
	tests := []struct {
		name      string
		script    string
		grace     time.Duration
		heartbeat time.Duration
		act       func(w io.WriteCloser, cancel context.CancelFunc)
		want      int
		atLeast   time.Duration // the grace that must be respected
		within    time.Duration
	}{
		{name: "stdin EOF", script: group, grace: 5 * time.Second,
			act: func(w io.WriteCloser, _ context.CancelFunc) { w.Close() }, want: 143, within: 4 * time.Second},
		{name: "stop line", script: group, grace: 5 * time.Second,
			act: func(w io.WriteCloser, _ context.CancelFunc) { io.WriteString(w, "stop\n") }, want: 143, within: 4 * time.Second},
		{name: "kill line", script: deaf, grace: time.Minute,
			act: func(w io.WriteCloser, _ context.CancelFunc) { io.WriteString(w, "kill\n") }, want: 137, within: 4 * time.Second},
		{name: "stop then kill escalates", script: deaf, grace: time.Minute,
			act: func(w io.WriteCloser, _ context.CancelFunc) {
				io.WriteString(w, "stop\n")
				time.Sleep(200 * time.Millisecond)
				io.WriteString(w, "kill\n")
			}, want: 137, within: 4 * time.Second},
		{name: "SIGTERM ignored: SIGKILL after grace", script: deaf, grace: time.Second,
			act: func(w io.WriteCloser, _ context.CancelFunc) { w.Close() }, want: 137, atLeast: time.Second, within: 6 * time.Second},
		{name: "context cancelled", script: group, grace: 5 * time.Second,
			act: func(_ io.WriteCloser, cancel context.CancelFunc) { cancel() }, want: 143, within: 4 * time.Second},
		{name: "heartbeat missed", script: group, grace: 5 * time.Second, heartbeat: 500 * time.Millisecond,
			act: func(io.WriteCloser, context.CancelFunc) {}, want: 143, within: 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r, w := io.Pipe()
			defer w.Close()
			var out capture
			res := runAsync(ctx, RunOptions{
				Args: []string{"sh", "-c", tt.script}, Grace: tt.grace, Heartbeat: tt.heartbeat,
				Stdin: r, Stdout: &out, Stderr: &out,
			})
			pids := pidsIn(out.waitFor(t, "ready", 5*time.Second))
			if len(pids) != 3 {
				t.Fatalf("want 3 pids, got %v", pids)
			}
			acted := time.Now()
			tt.act(w, cancel)
			got := await(t, res, tt.within+tt.atLeast)
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.code != tt.want {
				t.Errorf("exit code %d, want %d; output:\n%s", got.code, tt.want, out.String())
			}
			if d := time.Since(acted); d < tt.atLeast {
				t.Errorf("stopped after %s, before the %s grace", d, tt.atLeast)
			}
			assertGone(t, pids, 0)
		})
	}
}

func TestHeartbeatKeptAlive(t *testing.T) {
	t.Parallel()
	r, w := io.Pipe()
	defer w.Close()
	res := runAsync(context.Background(), RunOptions{
		Args: []string{"sleep", "1000"}, Grace: 5 * time.Second, Heartbeat: 400 * time.Millisecond, Stdin: r,
	})
	for range 15 {
		if _, err := io.WriteString(w, "ping\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case got := <-res:
		t.Fatalf("agent stopped although pings arrived: %+v", got)
	default:
	}
	io.WriteString(w, "stop\n")
	if got := await(t, res, 5*time.Second); got.code != 143 {
		t.Errorf("exit code %d, want 143", got.code)
	}
}

func TestLeftoversStoppedWhenCommandExits(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		want    int
		atLeast time.Duration
	}{
		{"grandchildren", `sleep 1000 & echo "pid $!"; sleep 1000 & echo "pid $!"; exit 5`, 5, 0},
		{"grandchild ignoring SIGTERM", `trap "" TERM; sleep 1000 & echo "pid $!"; exit 4`, 4, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out capture
			start := time.Now()
			code, err := Run(context.Background(), RunOptions{
				Args: []string{"sh", "-c", tt.script}, Grace: 500 * time.Millisecond, Stdout: &out, Stderr: &out,
			})
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.want {
				t.Errorf("exit code %d, want the command's %d", code, tt.want)
			}
			if d := time.Since(start); d < tt.atLeast {
				t.Errorf("finished after %s, before the grace %s", d, tt.atLeast)
			}
			pids := pidsIn(out.String())
			if len(pids) == 0 {
				t.Fatalf("no pids printed: %s", out.String())
			}
			assertGone(t, pids, 0)
		})
	}
}

func TestPidfileWrittenAndRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pids", "w0.pid")
	var out capture
	args := []string{"sh", "-c", `cat "$0"`, path}
	code, err := Run(context.Background(), RunOptions{Args: args, PIDFile: path, Job: "mnist", Stdout: &out})
	if err != nil || code != 0 {
		t.Fatalf("Run: code %d, err %v", code, err)
	}
	var pf Pidfile
	if err := json.Unmarshal([]byte(out.String()), &pf); err != nil {
		t.Fatalf("the command saw no valid pidfile: %v\n%s", err, out.String())
	}
	if pf.AgentPid != os.Getpid() {
		t.Errorf("agent_pid %d, want %d", pf.AgentPid, os.Getpid())
	}
	if pf.ChildPid == 0 || pf.Pgid != pf.ChildPid {
		t.Errorf("child_pid %d, pgid %d: want the child leading its own group", pf.ChildPid, pf.Pgid)
	}
	if pf.Job != "mnist" || !reflect.DeepEqual(pf.Argv, args) {
		t.Errorf("job %q argv %q", pf.Job, pf.Argv)
	}
	if pf.AgentStart == 0 || pf.ChildStart == 0 {
		t.Errorf("start ticks missing: %+v", pf)
	}
	if time.Since(pf.Started) > time.Minute || pf.Started.Location() != time.UTC {
		t.Errorf("started %v", pf.Started)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pidfile left behind: %v", err)
	}
}

func TestStopLeftoverStale(t *testing.T) {
	// An unrelated process (not an agent) that happens to have the pids.
	other := exec.Command("sleep", "1000")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	pid := other.Process.Pid

	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	dead := exited.Process.Pid

	tests := []struct {
		name    string
		content string // "" = no file
	}{
		{"no pidfile", ""},
		{"corrupt", "{not json"},
		{"dead pids", fmt.Sprintf(`{"agent_pid":%d,"child_pid":%d,"pgid":%d,"argv":["x"]}`, dead, dead, dead)},
		{"pids reused, start times differ", fmt.Sprintf(`{"agent_pid":%d,"agent_start_ticks":1,"child_pid":%d,"child_start_ticks":1,"pgid":%d,"argv":["sleep","1000"]}`, pid, pid, pid)},
		{"pids reused, no start times, other argv", fmt.Sprintf(`{"agent_pid":%d,"child_pid":%d,"pgid":%d,"argv":["python3","train.py"]}`, pid, pid, pid)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.pid")
			if tt.content != "" {
				if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			msg, err := StopLeftover(context.Background(), path, time.Second)
			if err != nil || msg != "" {
				t.Errorf("StopLeftover = %q, %v; want nothing stopped", msg, err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("stale pidfile not removed: %v", err)
			}
			if gone(pid) {
				t.Fatal("StopLeftover stopped an unrelated process")
			}
		})
	}
}

func TestCommand(t *testing.T) {
	tests := []struct {
		name string
		opts RunOptions
		want []string
	}{
		{"minimal", RunOptions{Args: []string{"python3", "train.py"}},
			[]string{"/d", "agent", "run", "--", "python3", "train.py"}},
		{"everything", RunOptions{Args: []string{"torchrun", "--nproc", "2", "--", "x"}, Grace: 15 * time.Second,
			Heartbeat: time.Minute, PIDFile: "/w/.drover/pids/w0.pid", LogFile: "/w/l", Job: "mnist"},
			[]string{"/d", "agent", "run", "--grace", "15s", "--heartbeat", "1m0s", "--pidfile", "/w/.drover/pids/w0.pid",
				"--log", "/w/l", "--job", "mnist", "--", "torchrun", "--nproc", "2", "--", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Command("/d", tt.opts); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Command = %q\nwant      %q", got, tt.want)
			}
		})
	}
	if got, want := StopCommand("/d", "/p.pid", 3*time.Second), []string{"/d", "agent", "stop", "--pidfile", "/p.pid", "--grace", "3s"}; !reflect.DeepEqual(got, want) {
		t.Errorf("StopCommand = %q, want %q", got, want)
	}
}
