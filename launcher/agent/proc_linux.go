package agent

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// becomeSubreaper makes orphaned descendants of this process be reparented
// to it rather than to init, so that they stay findable.
func becomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("become child subreaper: %w", errno)
	}
	return nil
}

// procInfo is what the agent needs from /proc/<pid>/stat.
type procInfo struct {
	pid, ppid, pgrp int
	state           byte
	start           uint64 // clock ticks after boot
	cpu             uint64 // utime+stime, clock ticks
}

// dead reports a zombie (or dying) process: it runs no code and holds no
// resources but its pid, and init may never reap it in a container.
func (p procInfo) dead() bool { return p.state == 'Z' || p.state == 'X' || p.state == 'x' }

// readStat parses /proc/<pid>/stat.
func readStat(pid int) (procInfo, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// comm may contain spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 > len(data) {
		return procInfo{}, false
	}
	f := bytes.Fields(data[i+2:])
	if len(f) < 20 || len(f[0]) != 1 {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, state: f[0][0]}
	p.ppid, _ = strconv.Atoi(string(f[1]))
	p.pgrp, _ = strconv.Atoi(string(f[2]))
	p.start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	ut, _ := strconv.ParseUint(string(f[11]), 10, 64)
	st, _ := strconv.ParseUint(string(f[12]), 10, 64)
	p.cpu = ut + st
	return p, true
}

// allProcs lists every process in /proc.
func allProcs() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procInfo, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, ok := readStat(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// startTicks is pid's start time in clock ticks after boot (0 if unknown):
// together with the pid it names a process for good, across pid reuse.
func startTicks(pid int) uint64 {
	p, ok := readStat(pid)
	if !ok {
		return 0
	}
	return p.start
}

// liveProcess reports whether pid runs (zombies do not count) and, when
// start is non-zero, is the process that started at that tick.
func liveProcess(pid int, start uint64) bool {
	p, ok := readStat(pid)
	if !ok || p.dead() {
		return false
	}
	return start == 0 || p.start == start
}

// cmdline is pid's argv, or nil when it cannot be read.
func cmdline(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(data) == 0 {
		return nil
	}
	parts := bytes.Split(bytes.TrimRight(data, "\x00"), []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}

// peekExited returns the pid of an exited child without reaping it
// (waitid WNOWAIT); without block, 0 when none has exited.
func peekExited(block bool) (int, error) {
	opts := unix.WEXITED | unix.WNOWAIT
	if !block {
		opts |= unix.WNOHANG
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, opts, nil); err != nil {
		return 0, err
	}
	return int(siginfoPid(&info)), nil
}

// siginfoPid is si_pid of a SIGCHLD siginfo_t: the first field of the
// union after si_signo, si_errno and si_code, which is aligned to a
// pointer (offset 16 on 64-bit Linux, 12 on 32-bit). x/sys/unix keeps the
// union unexported.
func siginfoPid(info *unix.Siginfo) int32 {
	align := unsafe.Sizeof(uintptr(0))
	off := (3*unsafe.Sizeof(int32(0)) + align - 1) &^ (align - 1)
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), off))
}

// procStateName is what `drover top` shows of process pid started at
// start: its scheduler state, or "gone".
func procStateName(pid int, start uint64) string {
	p, ok := readStat(pid)
	if !ok || (start != 0 && p.start != start) {
		return "gone"
	}
	switch p.state {
	case 'R':
		return "running"
	case 'S', 'I':
		return "sleeping"
	case 'D':
		return "disk-wait"
	case 'T', 't':
		return "stopped"
	case 'Z', 'X', 'x':
		return "zombie"
	}
	return string(p.state)
}

// userHZ is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on every
// architecture Linux builds for).
const userHZ = 100

// groupCPU is the CPU seconds (user and system) every live process of
// process group pgrp has used: what a rank's compute costs, its data
// loader workers included. Processes that already ended are not
// counted, so the sum may fall; a reader compares differences.
func groupCPU(pgrp int) (float64, bool) {
	var ticks uint64
	found := false
	for _, p := range allProcs() {
		if p.pgrp == pgrp {
			ticks += p.cpu
			found = true
		}
	}
	return float64(ticks) / userHZ, found
}

// procGroup is pid's process group, 0 when it cannot be read.
func procGroup(pid int) int {
	p, ok := readStat(pid)
	if !ok {
		return 0
	}
	return p.pgrp
}

// childAttr puts the command in a process group of its own and makes it
// die with the agent (Pdeathsig), whatever kills the agent (SIGKILL, the
// OOM killer). The kernel sends the parent-death signal when the thread
// that forked exits, not the process: Run forks from a locked thread that
// outlives the command (lockedThread). What the command started itself is
// stopped through its process group by whoever finds the pidfile (drover
// does, when an agent's channel ends without an exit report).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// exitStatus is the wait status of the zombie pid, from field 52 of
// /proc/<pid>/stat (Linux 3.5 and later): ok is false when pid is not a
// zombie or the field cannot be read. It lets the agent see how a
// process that is not its child (a torchrun worker) ended before its
// parent reaps it.
func exitStatus(pid int) (syscall.WaitStatus, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 > len(data) {
		return 0, false
	}
	f := bytes.Fields(data[i+2:])
	// Field 3 (state) is f[0]; field 52 (exit_code) is f[49].
	if len(f) < 50 || len(f[0]) != 1 || f[0][0] != 'Z' {
		return 0, false
	}
	code, err := strconv.Atoi(string(f[49]))
	if err != nil {
		return 0, false
	}
	return syscall.WaitStatus(code), true
}

// procEnviron is pid's environment as a map (nil when it cannot be read).
func procEnviron(pid int) map[string]string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil
	}
	env := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte{'='}); ok {
			env[string(k)] = string(v)
		}
	}
	return env
}

// stderrFile is the regular file pid's stderr goes to ("" for a pipe or
// a terminal): torchrun's --redirects send each worker's there.
func stderrFile(pid int) string {
	p, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/2")
	if err != nil || !strings.HasPrefix(p, "/") {
		return ""
	}
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return p
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	for _, p := range allProcs() {
		if p.ppid == pid && !p.dead() {
			out = append(out, p.pid)
		}
	}
	return out
}

// signalMainThread sends sig to pid's main thread alone (tgkill).
func signalMainThread(pid int, sig syscall.Signal) error { return syscall.Tgkill(pid, pid, sig) }

// stopped says whether pid is stopped (SIGSTOP, a debugger): a signal
// to it waits until it is continued.
func stopped(pid int) bool {
	p, ok := readStat(pid)
	return ok && (p.state == 'T' || p.state == 't')
}
