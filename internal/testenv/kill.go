package testenv

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// SignalAtCleanup sends sig to pid when t ends, but only if pid still names
// the process that runs now. A test's cleanup often signals a process it
// already killed and that someone else reaped: by then the kernel may have
// given the pid (pid_max is 32768 on many machines, and a CI run forks
// tens of thousands of processes) to another test's sshd, shell or test
// binary, which a blind kill would hit. With group set, it signals the
// process group pid leads instead, on the same condition.
func SignalAtCleanup(t testing.TB, pid int, sig syscall.Signal, group bool) {
	t.Helper()
	start, ok := startTicks(pid)
	t.Cleanup(func() {
		if ok {
			signalIfSame(pid, start, sig, group)
		}
	})
}

// signalIfSame sends sig to pid (its group with group set) if pid runs and
// started at start, and reports whether it did.
func signalIfSame(pid int, start uint64, sig syscall.Signal, group bool) bool {
	if now, alive := startTicks(pid); !alive || now != start {
		return false
	}
	target := pid
	if group {
		target = -pid
	}
	return syscall.Kill(target, sig) == nil
}

// startTicks is pid's start time in clock ticks after boot, from
// /proc/PID/stat; false when pid does not run (a zombie does not count).
func startTicks(pid int) (uint64, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	k := bytes.LastIndexByte(stat, ')')
	if err != nil || k < 0 {
		return 0, false
	}
	f := bytes.Fields(stat[k+1:])
	// After the name: state is field 3 of stat(5), starttime field 22.
	if len(f) < 20 || string(f[0]) == "Z" {
		return 0, false
	}
	n, err := strconv.ParseUint(string(f[19]), 10, 64)
	return n, err == nil
}
