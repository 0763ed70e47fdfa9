//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The command's environment comes over stdin (EnvFromStdin): the command
// gets it, with PATH from it used to find the program, and the agent's own
// environ never holds it, so that a search for RANK=3 in /proc/*/environ
// finds the rank and not its agent.
func TestCLIEnvFromStdinNotInAgentEnviron(t *testing.T) {
	bin := t.TempDir()
	prog := filepath.Join(bin, "show-rank")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho \"rank=$RANK secret=$HF_TOKEN\"\necho ready\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, stdin, out := startAgent(t, RunOptions{Args: []string{"show-rank"}, EnvFromStdin: true, Grace: time.Second})
	line, err := EnvLine(map[string]string{"RANK": "3", "HF_TOKEN": "tok-1", "PATH": bin + ":/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(line); err != nil {
		t.Fatal(err)
	}
	got := out.waitFor(t, "ready", 10*time.Second)
	if !strings.Contains(got, "rank=3 secret=tok-1\n") {
		t.Fatalf("the command did not get its environment: %q", got)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(environ), "\x00") {
		if kv == "RANK=3" || strings.HasPrefix(kv, "HF_TOKEN=") {
			t.Errorf("the agent's own environ holds %q", kv)
		}
	}
	stdin.Close()
	if code := waitExit(t, cmd, 10*time.Second); code != 143 {
		t.Errorf("agent exit %d, want 143 (stopped when stdin closed)", code)
	}
}

// A worker of the command (a torchrun stand-in that never reaps, as
// torchrun looks at its workers only every few seconds) SIGKILLed at
// start-up is reported at once, with its rank and the end of its own
// stderr file, and ends the run as that worker's failure: the group is
// stopped and the agent exits 137, although the stand-in would sleep on.
// A worker that exits 0 is reported too, and stops nothing.
func TestCLIWatchWorkersReportsFirstAbnormalExit(t *testing.T) {
	dir := t.TempDir()
	script := `RANK=0 LOCAL_RANK=0 sh -c 'sleep 0.5; exit 0' &
RANK=3 LOCAL_RANK=1 sh -c 'echo "rank 3 starting" >&2; sleep 1; kill -KILL $$' 2>` + dir + `/stderr-3.log &
RANK=2 LOCAL_RANK=2 sleep 1000 &
exec sleep 1000`
	cmd, stdin, out := startAgent(t, RunOptions{Args: []string{"sh", "-c", script}, WatchWorkers: true, Grace: 2 * time.Second})
	defer stdin.Close()
	start := time.Now()
	if code := waitExit(t, cmd, 30*time.Second); code != 137 {
		t.Fatalf("agent exit %d, want 137 (the worker's SIGKILL); output:\n%s", code, out.String())
	}
	t.Logf("the run ended %s after it started", time.Since(start).Round(time.Millisecond))
	var reports []WorkerExit
	for _, l := range strings.Split(out.String(), "\n") {
		if w, ok := ParseWorkerExit(l); ok {
			reports = append(reports, w)
		}
	}
	if len(reports) < 2 {
		t.Fatalf("want reports of ranks 0 and 3, got %+v; output:\n%s", reports, out.String())
	}
	if r := reports[0]; r.Rank != 0 || r.Status != 0 || r.Abnormal() {
		t.Errorf("first report %+v, want rank 0 exiting 0", r)
	}
	r := reports[1]
	if r.Rank != 3 || r.LocalRank != 1 || r.Status != 137 || r.Signal != "KILL" || r.Stderr != "rank 3 starting" {
		t.Errorf("second report %+v, want rank 3 (local 1) killed by SIGKILL with its stderr", r)
	}
	if !strings.Contains(out.String(), "worker rank 3 (local rank 1, pid ") || !strings.Contains(out.String(), "killed by SIGKILL (137)") {
		t.Errorf("the report is not in words:\n%s", out.String())
	}
}

// The agent makes the directory of DROVER_PROGRESS_FILE before the
// command starts (drover no longer makes it over SFTP before every start),
// so a process may touch the file as its first act; the directory is the
// login user's only.
func TestCLIMakesProgressFileDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "wd", ".drover", "progress", "worker-0")
	cmd, stdin, out := startAgent(t, RunOptions{Args: []string{"sh", "-c", `touch "$DROVER_PROGRESS_FILE" && echo touched`}, EnvFromStdin: true, Grace: time.Second})
	defer stdin.Close()
	line, err := EnvLine(map[string]string{"DROVER_PROGRESS_FILE": file, "PATH": "/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(line); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 10*time.Second); code != 0 {
		t.Fatalf("agent exit %d, want 0; output:\n%s", code, out.String())
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the command could not touch its progress file: %v; output:\n%s", err, out.String())
	}
	fi, err := os.Stat(filepath.Dir(file))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("progress directory mode %o, want no access for group and others", perm)
	}
}
