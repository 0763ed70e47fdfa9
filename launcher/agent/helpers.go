package agent

import (
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// helpers are the agent's own short-lived children, started with os/exec
// and waited for by it (py-spy on a hang). An agent that is a subreaper
// reaps any child that exits, so that adopted orphans do not pile up as
// zombies; it must leave these to their exec.Cmd, whose Wait would
// otherwise fail with ECHILD and lose the exit status. Where the kernel
// lets the reaper look at an exited child without reaping it (waitid
// with WNOWAIT, Linux), it skips helpers; elsewhere it may reap one, whose
// Wait then fails: py-spy counts as failed and faulthandler is asked.
type helpers struct {
	mu   sync.Mutex
	pids map[int]bool
}

func newHelpers() *helpers { return &helpers{pids: map[int]bool{}} }

// start starts cmd and records it as a helper in one step, under the lock
// the reaper takes before deciding: a helper that exits at once is never
// taken for an orphan.
func (h *helpers) start(cmd *exec.Cmd) error {
	if h == nil {
		return cmd.Start()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	h.pids[cmd.Process.Pid] = true
	return nil
}

// done forgets a helper once its exec.Cmd has waited for it.
func (h *helpers) done(pid int) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pids, pid)
}

func (h *helpers) has(pid int) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pids[pid]
}

// helperPoll is how long the reaper waits for a helper's exec.Cmd to reap
// it before looking again.
const helperPoll = 5 * time.Millisecond

// reapOne reaps one exited child that is not a helper and returns its pid
// and status. block waits for one; without it, pid 0 means none is there.
// err is ECHILD when the agent has no children left.
func (h *helpers) reapOne(block bool) (int, syscall.WaitStatus, error) {
	for {
		pid, err := peekExited(block)
		if errors.Is(err, errNoPeek) {
			return reapAny(block)
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return pid, 0, err
		}
		if h.has(pid) {
			if !block {
				return 0, 0, nil
			}
			time.Sleep(helperPoll)
			continue
		}
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR || err == syscall.ECHILD || (err == nil && got == 0) {
			continue // its exec.Cmd reaped it meanwhile; look again
		}
		return got, ws, err
	}
}

// reapAny is reapOne where exited children cannot be looked at first.
func reapAny(block bool) (int, syscall.WaitStatus, error) {
	opts := 0
	if !block {
		opts = syscall.WNOHANG
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, opts, nil)
		if err == syscall.EINTR {
			continue
		}
		return pid, ws, err
	}
}

var errNoPeek = errors.New("cannot look at exited children without reaping them here")
