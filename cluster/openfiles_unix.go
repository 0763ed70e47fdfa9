//go:build unix

package cluster

import "syscall"

// OpenFileLimit is this process's soft RLIMIT_NOFILE (`ulimit -n`), 0 when
// it cannot be read.
func OpenFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}
