package agent

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Linux's ioprio_set(2) values: the idle class, for the calling thread.
const (
	ioprioWhoProcess = 1
	ioprioClassShift = 13
	ioprioClassIdle  = 3
)

// IOPrioIdle is the I/O priority value of the idle class, as ioprio_get(2)
// reports it.
const IOPrioIdle = ioprioClassIdle << ioprioClassShift

func lowerAndReexec() error {
	runtime.LockOSThread() // the exec below must run on the thread changed here
	if err := unix.Setpriority(unix.PRIO_PROCESS, 0, niceLowest); err != nil {
		return fmt.Errorf("lower the agent's CPU priority (nice %d): %w", niceLowest, err)
	}
	// A kernel without I/O priorities (or a scheduler that ignores them)
	// leaves the I/O class alone; nice alone still applies.
	_, _, _ = unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, 0, IOPrioIdle)
	lowerAutogroup()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("lower the agent's priority: find its own binary: %w", err)
	}
	if err := syscall.Exec(self, os.Args, os.Environ()); err != nil {
		return fmt.Errorf("lower the agent's priority: execute %s again: %w", self, err)
	}
	return nil
}

// lowerAutogroup gives the agent's autogroup nice 19 too. With
// sched_autogroup_enabled (the default of many distribution kernels, for
// tasks outside a cgroup with the cpu controller), the scheduler first
// shares the CPU between sessions, each an autogroup, and a process's own
// nice counts only within its session: sshd starts every command in a
// session of its own, so nice 19 alone would leave the copy an equal share
// beside training. Only a session leader changes it, since the autogroup
// is the whole session's: under sshd the agent is one, alone in it; run
// from drover's own session (the local transport) it is not, and leaves
// it alone. Best effort: a kernel without autogroups has no such file.
func lowerAutogroup() {
	if sid, err := unix.Getsid(0); err != nil || sid != os.Getpid() {
		return
	}
	_ = os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(niceLowest)), 0)
}
