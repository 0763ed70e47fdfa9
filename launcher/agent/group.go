package agent

import (
	"context"
	"sync"
	"syscall"
	"time"
)

// group is what the agent answers for: the process group it created and,
// as a subreaper (root > 0), every descendant of root. It finds, signals
// and reaps those processes and dumps the stacks of its Python ones; what
// depends on /proc is in group_linux.go, with its fallback in
// group_other.go.
type group struct {
	pgid int
	root int
	// helpers are the agent's own children that reaping must leave alone
	// (nil: none).
	helpers *helpers
}

// hookDumpWait bounds a dump through drover's hook on a hang: drover
// stops the group stackDumpWait (2 s) after it asked.
const hookDumpWait = 1500 * time.Millisecond

// dumpStacks asks every Python process of g for its stack, so that each
// lands in that process's own output and log: drover sends "stacks" when
// the group is hung, a moment before it stops it. When the host has
// py-spy (on the agent's PATH), `py-spy dump --pid PID` prints it without
// harming the process, native code included; all processes are dumped at
// once. Where py-spy is missing or fails (a kernel that allows ptrace only
// of descendants: Ubuntu's default Yama ptrace_scope 1 refuses py-spy, a
// sibling, without CAP_SYS_PTRACE), drover's own hook does (a process
// drover started with a Python command: see Stacks), which leaves the
// process running; without the hook, faulthandler does it: with
// PYTHONFAULTHANDLER on (drover sets it), SIGABRT makes Python print every
// thread's stack and abort, even while blocked in C code (a collective);
// SIGCONT wakes a frozen (SIGSTOPped) one so that it can. Otherwise the
// process is left alone. py-spy is looked up on the command's PATH
// (environ: the login PATH, or PATH from [job.env]).
func (g group) dumpStacks(notice func(format string, args ...any), environ []string) {
	pids, fh := g.pythonMembers()
	dumped, said := make([]bool, len(pids)), make([]string, len(pids))
	if bin, err := lookPath("py-spy", environ); err == nil {
		var wg sync.WaitGroup
		for i, pid := range pids {
			wg.Add(1)
			go func() { defer wg.Done(); said[i], dumped[i] = g.helpers.pySpyDump(bin, pid) }()
		}
		wg.Wait()
	}
	// drover's hook (see Stacks) prints without ending the process.
	hooked := make([]string, len(pids))
	var wg sync.WaitGroup
	for i, pid := range pids {
		if dumped[i] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hooked[i], _ = hookDump(context.Background(), pid, procEnv(pid)[StacksDirEnv], hookDumpWait)
		}()
	}
	wg.Wait()
	for i, pid := range pids {
		if said[i] != "" && !(hooked[i] != "" && !dumped[i]) {
			notice("%s", said[i])
		}
		switch {
		case dumped[i]:
		case hooked[i] != "":
			notice("group hung: stack of Python process %d (drover's faulthandler hook):\n%s", pid, hooked[i])
		case fh[i]:
			notice("group hung: asking Python process %d for its stack (SIGABRT, faulthandler)", pid)
			noCoreDump(pid)
			_ = syscall.Kill(pid, syscall.SIGABRT)
			_ = syscall.Kill(pid, syscall.SIGCONT)
		default:
			notice("group hung: no stack for Python process %d: faulthandler is off and py-spy is not installed or failed", pid)
		}
	}
}
