//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/testfleet"
)

// These tests run the agent where drover runs it: on fleet hosts over SSH,
// installed by cluster.InstallAgent.

func dial(t *testing.T, i int) cluster.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := cluster.Dial(ctx, fleet.ClusterHosts()[i], cluster.DialOptions{SSHConfigPath: "none", AgentSocket: "none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func install(t *testing.T, tr cluster.Transport) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	remote, err := cluster.InstallAgent(ctx, tr, droverBinary(t))
	if err != nil {
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
	deadline := time.Now().Add(within)
	for {
		got := jobProcs(t, i, marker)
		if (n == 0 && len(got) == 0) || (n > 0 && len(got) >= n) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %d: want %d process(es) of %q within %s, have %v", i, n, marker, within, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

func TestFleetInstallAgent(t *testing.T) {
	testfleet.Need(t, fleet)
	tr := dial(t, 0)
	remote := install(t, tr)
	if !regexp.MustCompile(`^/home/drovertest/\.drover/bin/drover-[0-9a-f]{12}$`).MatchString(remote) {
		t.Errorf("installed at %q", remote)
	}
	fsys, err := tr.FS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := fsys.Stat(remote)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode())
	}
	// Mark the upload: a second install must leave the file alone.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := fsys.Chtimes(remote, old, old); err != nil {
		t.Fatal(err)
	}
	if again := install(t, tr); again != remote {
		t.Errorf("second install at %q, first at %q", again, remote)
	}
	if fi, err := fsys.Stat(remote); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("second install re-uploaded (mtime %v, err %v)", fi.ModTime(), err)
	}
	entries, err := fsys.ReadDir(path.Dir(remote))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("install left %q in %s", names, path.Dir(remote))
	}

	// The installed binary works there.
	// stdin stays open: its end would mean "drover is gone, stop".
	stdin, hold := io.Pipe()
	defer hold.Close()
	var out bytes.Buffer
	p, err := tr.Start(context.Background(), cluster.Cmd{Args: Command(remote, RunOptions{Args: []string{"sh", "-c", "echo hi; exit 3"}}), Stdin: stdin, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	var ee *cluster.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Code != 3 || out.String() != "hi\n" {
		t.Errorf("remote agent run: err %v, output %q; want exit 3 and hi", err, out.String())
	}
}

func TestInstallAgentLocal(t *testing.T) {
	tr, err := cluster.Dial(context.Background(), config.Host{Name: "me", Address: "local", Transport: config.TransportLocal}, cluster.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	bin := droverBinary(t)
	got, err := cluster.InstallAgent(context.Background(), tr, bin)
	if err != nil || got != bin {
		t.Errorf("InstallAgent(local) = %q, %v; want the binary itself, %q", got, err, bin)
	}
}

// drover SIGKILLed, or exiting without stopping its processes: its SSH
// connection closes, sshd closes the agent's stdin, and the group is
// stopped within the grace.
func TestFleetConnectionClosedStopsGroup(t *testing.T) {
	testfleet.Need(t, fleet)
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
	testfleet.Need(t, fleet)
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
