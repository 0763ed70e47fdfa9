//go:build !linux

package agent

import (
	"fmt"
	"os"
	"syscall"
)

// Without per-thread priorities (macOS, the BSDs) setpriority applies to
// the whole process, and there is no I/O class to set.
func lowerAndReexec() error {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, os.Getpid(), niceLowest); err != nil {
		return fmt.Errorf("lower the agent's CPU priority (nice %d): %w", niceLowest, err)
	}
	return nil
}
