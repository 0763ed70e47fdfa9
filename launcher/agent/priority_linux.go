package agent

import (
	"fmt"
	"os"
	"runtime"
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
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("lower the agent's priority: find its own binary: %w", err)
	}
	if err := syscall.Exec(self, os.Args, os.Environ()); err != nil {
		return fmt.Errorf("lower the agent's priority: execute %s again: %w", self, err)
	}
	return nil
}
