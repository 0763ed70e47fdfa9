package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A group's processes on Linux are found in /proc: its members, and a
// subreaper's descendants that left the group.

// members returns the live processes of g: the group's members and, for a
// subreaper, every live descendant of root but the agent's helpers and
// theirs.
func (g group) members() []int {
	procs := allProcs()
	var out []int
	seen := map[int]bool{}
	for _, p := range procs {
		if p.pgrp == g.pgid && !p.dead() && p.pid != g.root {
			out = append(out, p.pid)
			seen[p.pid] = true
		}
	}
	if g.root <= 0 {
		return out
	}
	children := map[int][]procInfo{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	queue := []int{g.root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if g.helpers.has(c.pid) {
				// The agent's own (a container's stop by name): not
				// the command's, and what it starts neither.
				continue
			}
			queue = append(queue, c.pid)
			if !c.dead() && !seen[c.pid] {
				out = append(out, c.pid)
				seen[c.pid] = true
			}
		}
	}
	return out
}

// alive reports whether any process of g still runs.
func (g group) alive() bool { return len(g.members()) > 0 }

// signal sends sig to the group and to every descendant that left it.
func (g group) signal(sig syscall.Signal) {
	_ = syscall.Kill(-g.pgid, sig)
	if g.root > 0 {
		for _, pid := range g.members() {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// reap collects exited children of a subreaper, so that adopted orphans do
// not stay zombies.
func (g group) reap() {
	if g.root <= 0 {
		return
	}
	for {
		pid, _, err := g.helpers.reapOne(false)
		if pid <= 0 || err != nil {
			return
		}
	}
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

// noCoreDump sets pid's core-file size limit to 0, so that the SIGABRT
// which makes it print its stack does not also write a core file (which
// for a CUDA process can be gigabytes) into the workdir.
func noCoreDump(pid int) {
	_ = unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{Cur: 0, Max: 0}, nil)
}
