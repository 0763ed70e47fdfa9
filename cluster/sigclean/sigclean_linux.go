package sigclean

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const supported = true

// selfExe is resolved by the kernel in the started child, which is still
// a copy of this binary: it names this binary even when the file was
// replaced or removed since.
const selfExe = "/proc/self/exe"

// kernelSigaction is the kernel's struct sigaction on Linux (the layout
// rt_sigaction takes, not libc's); only the handler is set here.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// trampoline is the started child's first act: default dispositions for
// every ignored signal (the ones Go handles become default at execve by
// themselves), an empty mask on the thread that calls execve, then the
// program. It never returns: on failure it exits as a shell would, 127
// for a missing program and 126 otherwise.
func trampoline(path string) {
	runtime.LockOSThread()
	for sig := 1; sig <= 64; sig++ {
		if sig == int(syscall.SIGKILL) || sig == int(syscall.SIGSTOP) {
			continue
		}
		var old kernelSigaction
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			continue
		}
		if old.handler == uintptr(1) { // SIG_IGN
			def := kernelSigaction{}
			unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&def)), 0, 8, 0, 0)
		}
	}
	var empty unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &empty, nil); err != nil {
		fail(path, err)
	}
	fail(path, syscall.Exec(path, os.Args, without(os.Environ())))
}

func fail(path string, err error) {
	fmt.Fprintf(os.Stderr, "drover: start %s: %v\n", path, err)
	if errors.Is(err, syscall.ENOENT) {
		os.Exit(127)
	}
	os.Exit(126)
}
