//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// The tests in this file drive the real `drover agent` CLI: what drover
// runs on hosts, with the subreaper and parent watch only the CLI enables.

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// droverBinary builds ./cmd/drover once per test run (fleettest.BuildDrover:
// DROVER_TEST_BINARY names a prebuilt one instead).
func droverBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "drover-agent-test-")
		if err != nil {
			buildErr = err
			return
		}
		// World-readable: fleet tests upload it, local ones run it as is.
		if err := os.Chmod(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		buildPath, buildErr = fleettest.BuildDrover(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// startAgent starts `drover agent run` for opts with a stdin the test holds.
func startAgent(t *testing.T, opts RunOptions) (*exec.Cmd, io.WriteCloser, *capture) {
	t.Helper()
	argv := Command(droverBinary(t), opts)
	cmd := exec.Command(argv[0], argv[1:]...)
	var out capture
	cmd.Stdout, cmd.Stderr = &out, &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
		}
	})
	return cmd, stdin, &out
}

func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("agent still running after %s", within)
		return -1
	}
}

func TestCLIExitStatusAndOutput(t *testing.T) {
	cmd, stdin, out := startAgent(t, RunOptions{Args: []string{"sh", "-c", "echo hello; echo oops >&2; exit 7"}})
	defer stdin.Close()
	if code := waitExit(t, cmd, 10*time.Second); code != 7 {
		t.Errorf("exit %d, want 7", code)
	}
	if got := out.String(); !strings.Contains(got, "hello\n") || !strings.Contains(got, "oops\n") {
		t.Errorf("output %q", got)
	}
}

// An agent killed outright (OOM killer, kill -9) takes its command with it
// (Pdeathsig) but leaves what the command started in the group: the log
// still holds what was written, and `drover agent stop` finds the group
// through the pidfile and stops it.
func TestCLIAgentKilledLogKeptAndLeftoverStopped(t *testing.T) {
	dir := t.TempDir()
	pidfile, logfile := filepath.Join(dir, "pids", "w0.pid"), filepath.Join(dir, "logs", "w0.log")
	script := `i=0; while [ $i -lt 50 ]; do echo "line $i"; i=$((i+1)); done; sleep 1000 & echo "pid $!"; echo "pid $$"; echo ready; wait`
	cmd, stdin, _ := startAgent(t, RunOptions{Args: []string{"sh", "-c", script}, PIDFile: pidfile, LogFile: logfile, Job: "mnist", Grace: 2 * time.Second})
	defer stdin.Close()
	var log string
	testenv.Wait(t, 10*time.Second, "the log to say ready", func() (bool, string) {
		data, _ := os.ReadFile(logfile)
		log = string(data)
		return strings.Contains(log, "ready\n"), fmt.Sprintf("%q", log)
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 5*time.Second); code != 137 {
		t.Fatalf("agent exit %d, want 137", code)
	}
	for i := range 50 {
		if !strings.Contains(log, "line "+strconv.Itoa(i)+"\n") {
			t.Errorf("log lacks line %d", i)
		}
	}
	pids := pidsIn(log)
	if len(pids) != 2 {
		t.Fatalf("want 2 pids in log, got %v", pids)
	}
	// The command (the group's leader, "pid $$") dies with its agent:
	// its parent-death signal, set from a thread that lives as long as
	// the agent. What it started ("pid $!") is left in its group.
	assertGone(t, pids[1:], 5*time.Second)
	if gone(pids[0]) {
		t.Fatalf("group member %d died with the agent; the test needs a leftover", pids[0])
	}

	stop := exec.Command(droverBinary(t), StopCommand("", pidfile, 2*time.Second)[1:]...)
	got, err := stop.CombinedOutput()
	if err != nil {
		t.Fatalf("agent stop: %v\n%s", err, got)
	}
	want := regexp.MustCompile(`^stopped leftover group \d+ \(sh -c i=0; .*\) from job mnist started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n$`)
	if !want.Match(got) {
		t.Errorf("agent stop printed %q", got)
	}
	assertGone(t, pids, 0)
	if _, err := os.Stat(pidfile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pidfile not removed: %v", err)
	}
	again, err := exec.Command(droverBinary(t), StopCommand("", pidfile, time.Second)[1:]...).CombinedOutput()
	if err != nil || len(again) != 0 {
		t.Errorf("second stop: %v, printed %q; want silence", err, again)
	}
}

func TestStopLeftoverLiveAgent(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "w0.pid")
	script := `sleep 1000 & echo "pid $!"; echo "pid $$"; echo ready; wait`
	cmd, stdin, out := startAgent(t, RunOptions{Args: []string{"sh", "-c", script}, PIDFile: pidfile, Job: "mnist", Grace: time.Minute})
	defer stdin.Close()
	pids := pidsIn(out.waitFor(t, "ready", 10*time.Second))
	msg, err := StopLeftover(context.Background(), pidfile, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(msg, "stopped leftover group "+strconv.Itoa(pids[1])+" (sh -c sleep 1000") || !strings.Contains(msg, " from job mnist started ") {
		t.Errorf("message %q", msg)
	}
	if code := waitExit(t, cmd, 5*time.Second); code != 143 {
		t.Errorf("agent exit %d, want 143 (the command's SIGTERM)", code)
	}
	assertGone(t, pids, 0)
}

// Processes that leave the group (setsid) are still descendants: the
// subreaper agent adopts and stops them, also after the command exited.
func TestCLISubreaperStopsEscapees(t *testing.T) {
	script := `setsid sleep 1000 & echo "pid $!"; sh -c 'setsid sleep 1000 & echo "pid $!"' ; echo ready; exit 0`
	cmd, stdin, out := startAgent(t, RunOptions{Args: []string{"sh", "-c", script}, Grace: time.Second})
	defer stdin.Close()
	if code := waitExit(t, cmd, 10*time.Second); code != 0 {
		t.Errorf("exit %d, want the command's 0", code)
	}
	pids := pidsIn(out.String())
	if len(pids) != 2 {
		t.Fatalf("want 2 pids, got %q", out.String())
	}
	assertGone(t, pids, 0)
}

// When the process that started the agent dies while the agent's stdin
// stays open elsewhere, the agent notices the new parent and stops.
func TestCLIParentDeathStops(t *testing.T) {
	logfile := filepath.Join(t.TempDir(), "agent.log")
	argv := Command(droverBinary(t), RunOptions{Args: []string{"sh", "-c", `echo "pid $$"; exec sleep 1000`}, Grace: time.Second, LogFile: logfile})
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	// The shell hands its stdin (held open by the test) to the agent, says
	// the agent's pid and exits: the agent is orphaned, its stdin open.
	// (sh gives background jobs /dev/null as stdin: keep it in fd 3 first.)
	parent := exec.Command("sh", "-c", "exec 3<&0; "+strings.Join(quoted, " ")+` <&3 3<&- & echo "agent $!"; sleep 0.5`)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	parent.Stdin = r
	// A file, not a pipe: Run must not wait for the agent to close it.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	parent.Stdout, parent.Stderr = outFile, outFile
	if err := parent.Run(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	var text string
	testenv.Wait(t, 5*time.Second, "the pids in the output", func() (bool, string) {
		data, _ := os.ReadFile(outFile.Name())
		text = string(data)
		return strings.Contains(text, "pid "), fmt.Sprintf("%q", text)
	})
	m := regexp.MustCompile(`agent (\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no agent pid in %q", text)
	}
	agentPid := mustAtoi(t, m[1])
	pids := append(pidsIn(text), agentPid)
	assertGone(t, pids, 5*time.Second)
	if log, _ := os.ReadFile(logfile); !strings.Contains(string(log), "parent process") {
		t.Errorf("the agent did not stop because its parent died; log:\n%s", log)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// `agent preflight --stop-leftovers DIR` stops the group of every pidfile
// in DIR (one "leftover: " line each) before it checks: a port the
// leftover held is free by then, in the same command, one exchange with
// the host instead of one per pidfile plus one for the check.
func TestCLIPreflightStopsLeftoversFirst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pids")
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	// The leftover holds the port until it is stopped.
	listen := `import socket, sys, time
s = socket.socket()
s.bind(("", int(sys.argv[1])))
s.listen()
print("ready", flush=True)
time.sleep(1000)`
	script := `python3 -c "$1" "$2" & echo "pid $!"; echo "pid $$"; wait`
	cmd, stdin, out := startAgent(t, RunOptions{Args: []string{"sh", "-c", script, "sh", listen, port}, PIDFile: filepath.Join(dir, "w0.pid"), Job: "mnist", Grace: time.Minute})
	defer stdin.Close()
	pids := pidsIn(out.waitFor(t, "ready", 10*time.Second))
	if err := agentPreflight(t, "sh", port); err == nil {
		t.Fatalf("port %s is free while the leftover holds it: the test proves nothing", port)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a pidfile"), 0o644); err != nil {
		t.Fatal(err)
	}

	argv := PreflightCommand(droverBinary(t), PreflightOptions{Program: "sh", Ports: []string{port}, Leftovers: dir, Grace: 2 * time.Second})
	got, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("agent preflight: %v\n%s", err, got)
	}
	want := regexp.MustCompile(`(?s)^leftover: stopped leftover group ` + strconv.Itoa(pids[1]) + ` \(sh -c python3 .*\) from job mnist started \S+\n$`)
	if !want.Match(got) {
		t.Errorf("agent preflight printed %q", got)
	}
	waitExit(t, cmd, 10*time.Second)
	assertGone(t, pids, 0)
	if _, err := os.Stat(filepath.Join(dir, "w0.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pidfile not removed: %v", err)
	}

	// Nothing left: silent; a missing directory is no error either.
	for _, d := range []string{dir, filepath.Join(dir, "missing")} {
		argv = PreflightCommand(droverBinary(t), PreflightOptions{Leftovers: d})
		if again, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil || len(again) != 0 {
			t.Errorf("preflight over %s: %v, printed %q; want silence", d, err, again)
		}
	}
}

// agentPreflight runs `agent preflight -- program` with port to check.
func agentPreflight(t *testing.T, program, port string) error {
	argv := PreflightCommand(droverBinary(t), PreflightOptions{Program: program, Ports: []string{port}})
	return exec.Command(argv[0], argv[1:]...).Run()
}

// `agent preflight --stop-leftovers DIR --lease FILE --lease-id ID` stops
// nothing while FILE is not ID's lease: it prints what the lease holds
// after LeaseTakenPrefix and fails, and the group runs on (issue 30: a run
// whose workdir was taken over with --force stopped the new run's group
// as leftovers). With ID's lease it stops the group as before.
func TestCLIPreflightLeftoversOnlyUnderOwnLease(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pids")
	lease := filepath.Join(filepath.Dir(dir), "lease")
	cmd, stdin, out := startAgent(t, RunOptions{Args: []string{"sh", "-c", `echo "pid $$"; echo ready; sleep 1000`}, PIDFile: filepath.Join(dir, "w0.pid"), Job: "mnist", Grace: time.Minute})
	defer stdin.Close()
	pids := pidsIn(out.waitFor(t, "ready", 10*time.Second))
	preflight := func(id string) ([]byte, error) {
		argv := PreflightCommand(droverBinary(t), PreflightOptions{Leftovers: dir, Grace: 2 * time.Second, Lease: lease, LeaseID: id})
		return exec.Command(argv[0], argv[1:]...).CombinedOutput()
	}
	taker := `{"id":"taker","job":"mnist","host":"c","pid":1}`
	if err := os.Symlink(taker, lease); err != nil {
		t.Fatal(err)
	}
	got, err := preflight("mine")
	if err == nil || !strings.Contains(string(got), LeaseTakenPrefix+taker+"\n") || !strings.Contains(string(got), "no longer this run's") {
		t.Fatalf("preflight under another run's lease: %v, printed %q", err, got)
	}
	if ours, holds := CheckLease(lease, "taker"); !ours || holds != taker {
		t.Fatalf("CheckLease = %v, %q", ours, holds)
	}
	if err := syscall.Kill(pids[0], 0); err != nil {
		t.Fatalf("the group was stopped under another run's lease: %v", err)
	}
	if got, err = preflight("taker"); err != nil || !strings.HasPrefix(string(got), "leftover: stopped leftover group") {
		t.Fatalf("preflight under its own lease: %v, printed %q", err, got)
	}
	waitExit(t, cmd, 10*time.Second)
	assertGone(t, pids, 0)
}
