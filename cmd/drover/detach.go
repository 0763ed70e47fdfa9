//go:build !droveragent

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/launcher"
	"github.com/droverhq/drover/launcher/agent"
)

// detachedChildEnv marks the background supervisor `drover run -d` starts
// (its value is unused); the child removes it from its environment first.
const detachedChildEnv = "DROVER_DETACHED_SUPERVISOR"

// readyFD is the descriptor on which the background supervisor says it is
// running ("ready RUNID LOGDIR"), or, with --queue, waits in a host's GPU
// queue ("queued RUNID LOGDIR").
const readyFD = 3

// detachedChild reports whether this process is the background
// supervisor of `drover run -d`, and forgets the mark.
func detachedChild() bool {
	_, ok := os.LookupEnv(detachedChildEnv)
	os.Unsetenv(detachedChildEnv)
	return ok
}

// startDetached is `drover run -d`: it starts the same command line again
// as the background supervisor (own session, no terminal, inside a
// systemd scope where logind would kill it at logout), shows its events
// until its first attempt runs, then prints how to follow and stop it and
// returns. A run that cannot start fails as it would in the foreground.
func startDetached(c *cli.Context) error {
	return startBackground(c, func(word, id, logDir string, pid int) {
		describe := launcher.DescribeDetached
		if word == "queued" {
			describe = launcher.DescribeQueued
		}
		fmt.Fprintln(c.App.Writer, describe(id, c.Args().First()))
		fmt.Fprintf(c.App.Writer, "  supervisor: pid %d, output in %s\n", pid, filepath.Join(logDir, "supervisor.log"))
	})
}

// startBackground starts the same command line again as a background
// supervisor (see startDetached) and, once it says it is ready, has
// describe say how to follow it (word is what it said: ready or queued).
func startBackground(c *cli.Context, describe func(word, id, logDir string, pid int)) error {
	wrap, err := launcher.LogindGuard("/", currentUser())
	if err != nil {
		return cli.Exit(err.Error(), agent.ExitUsage)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the drover binary: %w", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start the background supervisor: %w", err)
	}
	argv := append(append(append([]string(nil), wrap...), self), os.Args[1:]...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), detachedChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("start the background supervisor: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the background supervisor %s: %w", strings.Join(argv, " "), err)
	}
	readyW.Close()
	copied := make(chan struct{})
	go func() { defer close(copied); _, _ = io.Copy(c.App.ErrWriter, out) }()
	return awaitReady(c, cmd, readyR, copied, describe)
}

// awaitReady waits for the background supervisor's "ready" (or
// "queued") line; when the pipe closes without one, the supervisor ended
// and its status is ours.
// Ctrl-C meanwhile stops it (the run was not started yet).
func awaitReady(c *cli.Context, cmd *exec.Cmd, readyR *os.File, copied <-chan struct{}, describe func(word, id, logDir string, pid int)) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, interruptSignals()...)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	line, _ := bufio.NewReader(readyR).ReadString('\n')
	readyR.Close()
	f := strings.Fields(line)
	if len(f) == 3 && (f[0] == "ready" || f[0] == "queued") {
		select {
		case <-copied:
		case <-time.After(2 * time.Second):
		}
		describe(f[0], f[1], f[2], cmd.Process.Pid)
		return nil
	}
	err := cmd.Wait()
	<-copied
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return cli.Exit("", ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("background supervisor: %w", err)
	}
	return cli.Exit("drover "+c.Command.Name+" -d: the background supervisor exited before it was ready", agent.ExitFailed)
}

// detachedSays is the background supervisor's launcher.RunOptions.Ready
// (word "ready") or Queued ("queued"): from then on its output goes to
// supervisor.log in the run directory (the terminal that started it may
// be gone), and `drover run -d` is told. The launcher calls one of them,
// once.
func detachedSays(word string) func(runID, logDir string) {
	return func(runID, logDir string) { detachedTell(word, runID, logDir) }
}

func detachedTell(word, runID, logDir string) {
	f, err := os.OpenFile(filepath.Join(logDir, "supervisor.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err == nil {
		_ = unix.Dup2(int(f.Fd()), 1)
		_ = unix.Dup2(int(f.Fd()), 2)
		f.Close()
	}
	ready := os.NewFile(readyFD, "ready")
	fmt.Fprintf(ready, "%s %s %s\n", word, runID, logDir)
	ready.Close()
}

// ignoreSIGPIPE keeps the background supervisor alive when the `drover
// run -d` that reads its output is gone before it is ready: Go dies of
// SIGPIPE on a write to fd 1 or 2 unless SIGPIPE is notified.
func ignoreSIGPIPE() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGPIPE)
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}
