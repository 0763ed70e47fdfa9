//go:build !linux

package agent

import "syscall"

// Without /proc the agent falls back to what POSIX offers: the process
// group alone, no adoption of orphans, no start-time identity.

func becomeSubreaper() error { return nil }

func startTicks(int) uint64 { return 0 }

func liveProcess(pid int, _ uint64) bool { return syscall.Kill(pid, 0) == nil }

func cmdline(int) []string { return nil }

func peekExited(bool) (int, error) { return 0, errNoPeek }

func procStateName(pid int, _ uint64) string {
	if syscall.Kill(pid, 0) != nil {
		return "gone"
	}
	return "running"
}

func groupCPU(int) (float64, bool) { return 0, false }

func procGroup(pid int) int {
	g, err := syscall.Getpgid(pid)
	if err != nil {
		return 0
	}
	return g
}
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func exitStatus(int) (syscall.WaitStatus, bool) { return 0, false }

func procEnviron(int) map[string]string { return nil }

func stderrFile(int) string { return "" }

func childrenOf(int) []int { return nil }

// signalMainThread is kill(2) where threads cannot be named.
func signalMainThread(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// stopped cannot tell without /proc.
func stopped(int) bool { return false }
