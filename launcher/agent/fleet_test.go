//go:build linux

package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/testenv"
)

// These tests run the agent where drover runs it: on fleet hosts over SSH,
// copied there as the installer would.

func dial(t *testing.T, i int) cluster.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := cluster.Dial(ctx, fleet.Endpoints()[i], cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// install copies the drover binary to the host (the installer proper,
// package remote, imports this package, so its tests live there).
func install(t *testing.T, tr cluster.Transport) string {
	t.Helper()
	fsys, err := tr.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	home, err := fsys.Home()
	if err != nil {
		t.Fatal(err)
	}
	remote := path.Join(home, ".drover-test", "drover")
	if err := fsys.MkdirAll(path.Dir(remote), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(droverBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A fresh name renamed into place: another test may be running the
	// binary already (a busy text file cannot be rewritten).
	tmp := fmt.Sprintf("%s.tmp-%d", remote, time.Now().UnixNano())
	w, err := fsys.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, f); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fsys.Rename(tmp, remote); err != nil {
		t.Fatal(err)
	}
	return remote
}

// jobProcs returns the live processes on host i whose command line
// contains marker (sshd sessions and zombies excluded).
func jobProcs(t *testing.T, i int, marker string) []int {
	t.Helper()
	pids, err := fleet.Pids(i)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, p := range pids {
		argv := cmdline(p)
		if gone(p) || len(argv) == 0 || strings.HasPrefix(argv[0], "sshd") {
			continue
		}
		if strings.Contains(strings.Join(argv, " "), marker) {
			out = append(out, p)
		}
	}
	return out
}

// waitProcs waits until jobProcs(i, marker) has at least n entries (n > 0)
// or none (n == 0), and returns them.
func waitProcs(t *testing.T, i int, marker string, n int, within time.Duration) []int {
	t.Helper()
	var got []int
	testenv.Wait(t, within, fmt.Sprintf("host %d: %d process(es) of %q", i, n, marker), func() (bool, string) {
		got = jobProcs(t, i, marker)
		return (n == 0 && len(got) == 0) || (n > 0 && len(got) >= n), fmt.Sprintf("have %v", got)
	})
	return got
}

// startRemote starts the agent on tr with a stdin the test holds open.
func startRemote(t *testing.T, tr cluster.Transport, remote string, opts RunOptions) (cluster.Process, *io.PipeWriter, *capture) {
	t.Helper()
	r, w := io.Pipe()
	t.Cleanup(func() { w.Close() })
	var out capture
	p, err := tr.Start(context.Background(), cluster.Cmd{Args: Command(remote, opts), Stdin: r, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	return p, w, &out
}

// drover SIGKILLed, or exiting without stopping its processes: its SSH
// connection closes, sshd closes the agent's stdin, and the group is
// stopped within the grace.
func TestFleetConnectionClosedStopsGroup(t *testing.T) {
	fleettest.Need(t, fleet)
	tr := dial(t, 0)
	remote := install(t, tr)
	const marker = "sleep 1031"
	p, _, _ := startRemote(t, tr, remote, RunOptions{
		Args: []string{"sh", "-c", marker + " & " + marker + " & wait"}, Grace: 2 * time.Second,
		PIDFile: ".drover/pids/closed.pid", Job: "ag",
	})
	waitProcs(t, 0, marker, 3, 10*time.Second) // the shell and both sleeps
	closed := time.Now()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err == nil {
		t.Error("Wait after Close returned nil")
	}
	waitProcs(t, 0, marker, 0, 2*time.Second+5*time.Second)
	t.Logf("group gone %s after the connection closed", time.Since(closed).Round(10*time.Millisecond))
	if out, err := fleet.Exec(0, "ls", "-A", "/home/drovertest/.drover/pids"); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("pidfile left behind: %q %v", out, err)
	}
}

// A cut link: sshd keeps the channel open (the test fleet, like OpenSSH's
// defaults, sets no ClientAliveInterval), so only the heartbeat stops the
// group; an agent without one runs on until a later drover stops it via
// its pidfile.
func TestFleetLinkCut(t *testing.T) {
	fleettest.Need(t, fleet)
	tr := dial(t, 1)
	remote := install(t, tr)
	const beat, deaf = "sleep 1041", "sleep 1042"
	const grace, heartbeat = 2 * time.Second, 2 * time.Second
	_, pinger, _ := startRemote(t, tr, remote, RunOptions{
		Args: []string{"sh", "-c", beat + " & wait"}, Grace: grace, Heartbeat: heartbeat,
		PIDFile: ".drover/pids/beat.pid", Job: "ag",
	})
	startRemote(t, tr, remote, RunOptions{
		Args: []string{"sh", "-c", deaf + " & wait"}, Grace: grace,
		PIDFile: ".drover/pids/deaf.pid", Job: "ag",
	})
	ctx, stopPings := context.WithCancel(context.Background())
	defer stopPings()
	go func() {
		for ctx.Err() == nil {
			if _, err := io.WriteString(pinger, "ping\n"); err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	waitProcs(t, 1, beat, 2, 10*time.Second)
	waitProcs(t, 1, deaf, 2, 10*time.Second)
	// Still running after a heartbeat period with pings arriving.
	time.Sleep(heartbeat + time.Second)
	waitProcs(t, 1, beat, 2, 0)

	if err := fleet.Cut(1); err != nil {
		t.Fatal(err)
	}
	healed := false
	defer func() {
		if !healed {
			fleet.Heal(1)
		}
	}()
	cut := time.Now()
	waitProcs(t, 1, beat, 0, heartbeat+grace+5*time.Second)
	t.Logf("with heartbeat: group gone %s after the cut", time.Since(cut).Round(10*time.Millisecond))
	time.Sleep(time.Until(cut.Add(10 * time.Second)))
	if left := jobProcs(t, 1, deaf); len(left) > 0 {
		t.Logf("without heartbeat: %d process(es) still running %s after the cut (sshd has not closed the channel)", len(left), time.Since(cut).Round(time.Second))
	}

	if err := fleet.Heal(1); err != nil {
		t.Fatal(err)
	}
	healed = true
	tr2 := dial(t, 1)
	var out bytes.Buffer
	p, err := tr2.Start(context.Background(), cluster.Cmd{Args: StopCommand(remote, ".drover/pids/deaf.pid", grace), Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("agent stop: %v: %s", err, out.String())
	}
	if len(jobProcs(t, 1, deaf)) == 0 && out.Len() == 0 {
		t.Log("the group without heartbeat had stopped by itself (sshd closed the channel)")
	} else if !strings.HasPrefix(out.String(), "stopped leftover group ") {
		t.Errorf("agent stop printed %q", out.String())
	}
	waitProcs(t, 1, deaf, 0, 5*time.Second)
}
