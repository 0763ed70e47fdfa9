package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// noCoreDump sets pid's core-file size limit to 0, so that the SIGABRT
// which makes it print its stack does not also write a core file (which
// for a CUDA process can be gigabytes) into the workdir.
func noCoreDump(pid int) {
	_ = unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{Cur: 0, Max: 0}, nil)
}

// pythonMembers returns the processes of g that run a Python interpreter,
// and for each whether faulthandler is enabled in its environment
// (PYTHONFAULTHANDLER non-empty), read from /proc.
func (g group) pythonMembers() (pids []int, faultHandler []bool) {
	for _, pid := range g.members() {
		argv := cmdline(pid)
		if len(argv) == 0 || !strings.HasPrefix(filepath.Base(argv[0]), "python") {
			exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			if err != nil || !strings.HasPrefix(filepath.Base(exe), "python") {
				continue
			}
		}
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		on := false
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("PYTHONFAULTHANDLER=")); ok && len(v) > 0 {
				on = true
			}
		}
		pids = append(pids, pid)
		faultHandler = append(faultHandler, on)
	}
	return pids, faultHandler
}
