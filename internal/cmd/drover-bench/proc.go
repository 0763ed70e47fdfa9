package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
)

// procStats is what one finished subprocess cost.
type procStats struct {
	Wall   time.Duration
	CPU    time.Duration // user + sys, the process and its waited-for children
	MaxRSS int64         // peak resident set in KiB (VmHWM, see watchHWM)
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

// hwmEvery is how often run samples a command's peak resident set.
const hwmEvery = 10 * time.Millisecond

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
	if err := cmd.Start(); err != nil {
		return procStats{}, fmt.Errorf("%s: %w", c.Args[0], err)
	}
	hwm := watchHWM(cmd.Process.Pid)
	err := cmd.Wait()
	st := procStats{Wall: time.Since(start), MaxRSS: hwm()}
	if ps := cmd.ProcessState; ps != nil {
		st.CPU = ps.UserTime() + ps.SystemTime()
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

// watchHWM samples pid's peak resident set (VmHWM, KiB) until the
// returned function is called, which gives the last sample. wait4's
// ru_maxrss is no use for a child of this process: Linux keeps, across
// exec, the peak of the memory the child shared with its parent before
// exec, so a large harness (the scale section's 256 light hosts) made
// drover look as large as itself. VmHWM is the peak of the exec'd image
// only; sampling misses at most the last few milliseconds.
func watchHWM(pid int) func() int64 {
	var peak atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	sample := func() {
		if kb, err := vmHWM(pid); err == nil && kb > peak.Load() {
			peak.Store(kb)
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(hwmEvery)
		defer t.Stop()
		for {
			sample()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return peak.Load()
	}
}

// vmHWM reads VmHWM from /proc/PID/status, in KiB.
func vmHWM(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, errors.New("no VmHWM")
}
