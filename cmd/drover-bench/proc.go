package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
)

// procStats is what one finished subprocess cost.
type procStats struct {
	Wall   time.Duration
	CPU    time.Duration // user + sys, the process and its waited-for children
	MaxRSS int64         // peak resident set in KiB (getrusage ru_maxrss)
}

// command is a subprocess to time. Every one runs in its own process group
// so that a timeout kills pdsh's or rsync's ssh children too, and under a
// timeout so that nothing the harness starts can hang it.
type command struct {
	Args    []string
	Env     []string // added to the harness's environment
	Dir     string
	Timeout time.Duration
}

// run starts c, waits for it and returns its wall time from just before the
// fork to the reaped exit (like `time`). A non-zero exit, a signal or the
// timeout is an error carrying the tail of its stderr.
func (c command) run(ctx context.Context) (procStats, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Args[0], c.Args[1:]...)
	cmd.Dir = c.Dir
	if len(c.Env) > 0 {
		cmd.Env = append(cmd.Environ(), c.Env...)
	}
	stderr := cluster.NewTailBuffer(4096)
	// Stdout goes to /dev/null: no pipe to drain, for every tool alike.
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 3 * time.Second
	start := time.Now()
	err := cmd.Run()
	st := procStats{Wall: time.Since(start)}
	if ps := cmd.ProcessState; ps != nil {
		st.CPU = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			st.MaxRSS = ru.Maxrss
		}
	}
	if err != nil {
		name := c.Args[0]
		if ctx.Err() == context.DeadlineExceeded {
			return st, fmt.Errorf("%s: timed out after %s", name, timeout)
		}
		if msg := lastLine(stderr.String()); msg != "" {
			return st, fmt.Errorf("%s: %w: %s", name, err, msg)
		}
		return st, fmt.Errorf("%s: %w", name, err)
	}
	return st, nil
}

// lastLine is the last non-empty line of s, shortened for a table cell.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	return shorten(l, 140)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// reason turns an error into the short text of an "n/a (...)" cell.
func reason(err error) string {
	if err == nil {
		return ""
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		return "not found: " + ee.Name
	}
	return shorten(strings.ReplaceAll(err.Error(), "\n", " "), 160)
}
