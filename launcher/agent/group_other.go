//go:build !linux

package agent

import "syscall"

// Without /proc a group is its process group alone: no adoption of
// orphans.

func (g group) alive() bool { return syscall.Kill(-g.pgid, 0) == nil }

func (g group) signal(sig syscall.Signal) { _ = syscall.Kill(-g.pgid, sig) }

func (g group) reap() {}

// Without /proc the agent cannot tell Python processes from others.
func (g group) pythonMembers() (pids []int, faultHandler []bool) { return nil, nil }

func noCoreDump(int) {}
