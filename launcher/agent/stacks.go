package agent

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/launcher/nccldiag"
)

// Live stacks (`drover agent stacks`, behind `drover stacks` and the hang
// verdict): the Python stack of every thread of every live process of a
// workdir's groups, taken without stopping anything. py-spy does it where
// the host has it (`py-spy dump`, native frames with --native); elsewhere
// drover's own hook does: for a Python command the plan puts
// StacksHookDir(DROVER_STACKS_DIR) first on PYTHONPATH, the agent that
// starts the command writes pyhook/sitecustomize.py there, and that file
// registers a faulthandler dump of all threads on SIGUSR2 into a file of
// the process's own, <pid>-<start ticks>.txt in DROVER_STACKS_DIR. The
// agent signals a process only when that file exists for this very
// process (pid and start time) and the process catches SIGUSR2 (SigCgt in
// /proc): SIGUSR2's default action would end it.

//go:embed pyhook/sitecustomize.py
var stacksHook []byte

// StacksDirEnv names the directory of the processes' stack files.
const StacksDirEnv = "DROVER_STACKS_DIR"

// StacksHookDir is where, under a DROVER_STACKS_DIR, the agent writes the
// sitecustomize.py that the plan puts first on PYTHONPATH.
func StacksHookDir(stacksDir string) string { return stacksDir + "/hook" }

// stackSignal is the signal the hook dumps on.
const stackSignal = syscall.SIGUSR2

// stackFileLimit bounds one dump as read: thousands of threads' frames.
const stackFileLimit = 4 << 20

// writeStacksHook writes the hook into StacksHookDir(dir) (atomically:
// a process starting now reads a whole file) and, where the plan's
// PYTHONPATH is the hook's directory alone, appends the login's own
// PYTHONPATH, which the plan cannot know.
func writeStacksHook(env map[string]string) error {
	dir := env[StacksDirEnv]
	if dir == "" {
		return nil
	}
	hook := StacksHookDir(dir)
	if err := os.MkdirAll(hook, privateDir); err != nil {
		return fmt.Errorf("agent run: create drover's stack hook directory %s: %w", hook, err)
	}
	if old, err := os.ReadFile(filepath.Join(hook, "sitecustomize.py")); err != nil || !bytes.Equal(old, stacksHook) {
		tmp, err := os.CreateTemp(hook, ".sitecustomize.py.tmp*")
		if err != nil {
			return fmt.Errorf("agent run: write drover's stack hook in %s: %w", hook, err)
		}
		_, werr := tmp.Write(stacksHook)
		if err := errors.Join(werr, tmp.Close(), os.Chmod(tmp.Name(), 0o644), os.Rename(tmp.Name(), filepath.Join(hook, "sitecustomize.py"))); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("agent run: write drover's stack hook in %s: %w", hook, err)
		}
	}
	if login := os.Getenv("PYTHONPATH"); env["PYTHONPATH"] == hook && login != "" {
		env["PYTHONPATH"] = hook + ":" + login
	}
	return nil
}

// StackReport is one process's stack as `drover agent stacks` reports it.
type StackReport struct {
	// Name is the process as drover names it (worker-4), from its pidfile.
	Name string `json:"name"`
	// Rank is RANK from the process's environment, -1 without one.
	Rank   int    `json:"rank"`
	Pid    int    `json:"pid"`
	Method string `json:"method,omitempty"` // "py-spy" or "faulthandler"
	Stack  string `json:"stack,omitempty"`
	Error  string `json:"error,omitempty"`
}

// StacksReport is `drover agent stacks`'s answer.
type StacksReport struct {
	Processes []StackReport `json:"processes"`
	// RAS is NCCL's RAS service's answer to STATUS at StacksOptions.RAS
	// (package nccldiag, control characters dropped, bounded), RASError
	// why there is none; NoRAS says that nothing there speaks RAS (an
	// NCCL before 2.24, RAS off), which the hang verdict keeps quiet.
	RAS      string `json:"ras,omitempty"`
	RASError string `json:"ras_error,omitempty"`
	NoRAS    bool   `json:"no_ras,omitempty"`
}

// StacksOptions say whose stacks `drover agent stacks` takes.
type StacksOptions struct {
	Workdir string
	Native  bool // py-spy's --native
	// HookOnly takes the stacks through drover's hook alone, never
	// py-spy: the hang verdict's, which the run agents' own dump into
	// the logs follows (with py-spy, once per process).
	HookOnly bool
	Wait     time.Duration // bounds each process's dump; 0: 10 s
	// RAS, when set, is the NCCL_RAS_ADDR (host:port, on this host) of
	// the group's RAS service, asked for its status alongside the stacks
	// (the hang verdict asks it on rank 0's host).
	RAS string
}

// StacksCommand is the argv of `drover agent stacks`.
func StacksCommand(binary string, o StacksOptions) []string {
	args := []string{binary, cmdAgent, cmdStacks, "--" + flagWorkdir, o.Workdir}
	if o.Native {
		args = append(args, "--"+flagNative)
	}
	if o.HookOnly {
		args = append(args, "--"+flagHookOnly)
	}
	if o.Wait > 0 {
		args = append(args, "--"+flagWait, o.Wait.String())
	}
	if o.RAS != "" {
		args = append(args, "--"+flagRAS, o.RAS)
	}
	return args
}

// Stacks takes the stack of every Python process of every live group
// of o.Workdir, all at once, each within o.Wait: a foreground run's
// groups through their agents' pidfiles, a detached run's through the
// state records of the workdir's newest run (see Report).
func Stacks(ctx context.Context, o StacksOptions) (*StacksReport, error) {
	if o.Wait <= 0 {
		o.Wait = 10 * time.Second
	}
	groups, err := liveGroups(o.Workdir)
	if err != nil {
		return nil, err
	}
	rep := &StacksReport{Processes: []StackReport{}}
	seen := map[int]bool{}
	for _, lg := range groups {
		pids, _ := lg.g.pythonMembers()
		for _, pid := range pids {
			if seen[pid] {
				continue
			}
			seen[pid] = true
			rep.Processes = append(rep.Processes, StackReport{Name: lg.name, Rank: -1, Pid: pid})
		}
	}
	var wg sync.WaitGroup
	for i := range rep.Processes {
		wg.Add(1)
		go func() { defer wg.Done(); stackOf(ctx, &rep.Processes[i], o) }()
	}
	if o.RAS != "" {
		wg.Add(1)
		go func() { defer wg.Done(); askRAS(ctx, rep, o.RAS) }()
	}
	wg.Wait()
	sort.SliceStable(rep.Processes, func(i, j int) bool { return rep.Processes[i].Name < rep.Processes[j].Name })
	return rep, nil
}

// namedGroup is a live group and the process drover named it for.
type namedGroup struct {
	name string
	g    group
}

// liveGroups are workdir's groups whose agent lives: those of the
// pidfiles (foreground runs), then those of the newest detached run's
// current attempt.
func liveGroups(workdir string) ([]namedGroup, error) {
	dir := filepath.Join(workdir, ".drover", "pids")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("agent stacks: read %s: %w", dir, err)
	}
	var out []namedGroup
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		data, err := readRegular(filepath.Join(dir, e.Name()), maxStateFile)
		pf, perr := parsePidfile(data)
		if err != nil || perr != nil || pf.AgentPid <= 0 || !isAgent(pf.AgentPid, pf.AgentStart) {
			continue
		}
		out = append(out, namedGroup{name, group{pgid: pf.Pgid, root: pf.AgentPid}})
	}
	rep, err := Report(workdir, "")
	if err != nil {
		return out, nil // no detached run to read: the pidfiles' groups
	}
	for _, p := range rep.Processes {
		if p.Alive && !p.Final() && p.Pid > 0 && p.AgentPid > 0 {
			out = append(out, namedGroup{p.Name, group{pgid: p.Pid, root: p.AgentPid}})
		}
	}
	return out, nil
}

// stackOf fills r with its process's stack: py-spy's, else the hook's.
func stackOf(ctx context.Context, r *StackReport, o StacksOptions) {
	env := procEnv(r.Pid)
	if n, err := strconv.Atoi(env["RANK"]); err == nil {
		r.Rank = n
	}
	environ := make([]string, 0, len(env))
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	var spyErr error
	if bin, err := lookPath("py-spy", environ); err == nil && !o.HookOnly {
		if r.Stack, spyErr = pySpy(ctx, bin, r.Pid, o); spyErr == nil {
			r.Method = "py-spy"
			return
		}
	}
	text, err := hookDump(ctx, r.Pid, env[StacksDirEnv], o.Wait)
	if err == nil {
		r.Method, r.Stack = "faulthandler", text
		return
	}
	if spyErr != nil {
		err = fmt.Errorf("py-spy failed (%v), and %w", spyErr, err)
	}
	r.Error = err.Error()
}

// pySpy runs `py-spy dump` on pid, within o.Wait.
func pySpy(ctx context.Context, bin string, pid int, o StacksOptions) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Wait)
	defer cancel()
	args := []string{"dump", "--pid", strconv.Itoa(pid)}
	if o.Native {
		args = append(args, "--native")
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("py-spy dump --pid %d: %w: %s", pid, err, strings.TrimSpace(out.String()))
	}
	return strings.TrimRight(out.String(), "\n"), nil
}

// hookDump has pid's hook write its stack (SIGUSR2) and reads what it
// appended to its file, once the file stopped growing.
func hookDump(ctx context.Context, pid int, dir string, wait time.Duration) (string, error) {
	if dir == "" {
		return "", errors.New("the process has no DROVER_STACKS_DIR: not a Python command drover started (install py-spy on the host for any process)")
	}
	file := filepath.Join(dir, fmt.Sprintf("%d-%d.txt", pid, startTicks(pid)))
	size, err := ownFileSize(file)
	if err != nil {
		return "", fmt.Errorf("drover's stack hook is not loaded in process %d (%w): a sitecustomize imported before drover's, or python -S/-I; install py-spy on the host", pid, err)
	}
	if stopped(pid) {
		// Signalled now, it would dump once continued, after the reader
		// gave up; and a hang's SIGABRT (see dumpStacks) is its stack.
		return "", fmt.Errorf("process %d is stopped (SIGSTOP or a debugger): not signalled; py-spy can read it", pid)
	}
	if !catches(pid, stackSignal) {
		return "", fmt.Errorf("process %d does not catch SIGUSR2 (its code replaced drover's handler?): not signalled; install py-spy on the host", pid)
	}
	// To the main thread alone (Python's, which waits in a collective on
	// a futex or sleeps in Python, both of which resume), never to a
	// helper thread in epoll or poll, which would see EINTR.
	if err := signalMainThread(pid, stackSignal); err != nil {
		return "", fmt.Errorf("signal process %d: %w", pid, err)
	}
	deadline := time.Now().Add(wait)
	last, stable := size, 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		n, err := ownFileSize(file)
		if err != nil {
			return "", err
		}
		if n == last && n > size {
			if stable++; stable >= 4 {
				break
			}
			continue
		}
		last, stable = n, 0
	}
	if last <= size {
		return "", fmt.Errorf("process %d wrote no stack within %s after SIGUSR2 (stopped, or blocked with signals masked?)", pid, wait)
	}
	return readFrom(file, size, min(last-size, stackFileLimit))
}

// ownFileSize is the size of file, which must be a regular file of this
// user's (the process writes it as the agent's user).
func ownFileSize(file string) (int64, error) {
	fi, err := os.Lstat(file)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Getuid() {
		return 0, fmt.Errorf("%s is not a regular file of this user's: not read", file)
	}
	return fi.Size(), nil
}

// readFrom reads n bytes of the regular file at path from off.
func readFrom(path string, off, n int64) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimRight(string(buf[:got]), "\n"), nil
}

// parsePidfile parses a pidfile's bytes.
func parsePidfile(data []byte) (*Pidfile, error) {
	var pf Pidfile
	if err := json.Unmarshal(data, &pf); err != nil {
		return nil, err
	}
	return &pf, nil
}

// procEnv is pid's environment as /proc shows it (empty without /proc).
func procEnv(pid int) map[string]string {
	env := map[string]string{}
	data, _ := readRegularProc("/proc/" + strconv.Itoa(pid) + "/environ")
	for _, kv := range bytes.Split(data, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			env[k] = v
		}
	}
	return env
}

// catches says whether pid has a handler for sig (SigCgt in its status).
func catches(pid int, sig syscall.Signal) bool {
	data, _ := readRegularProc("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// readRegularProc reads a /proc file of a process, bounded.
func readRegularProc(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// rasWait bounds the RAS query: NCCL's own 5 s for its peers' answers,
// and as much again for the rest, within the hang verdict's 15 s.
const rasWait = 10 * time.Second

// askRAS asks the RAS service at addr for the job's status into rep.
func askRAS(ctx context.Context, rep *StacksReport, addr string) {
	text, err := nccldiag.Query(ctx, addr, nccldiag.RASOptions{Timeout: rasWait})
	var no *nccldiag.NoRASError
	switch {
	case errors.As(err, &no):
		rep.NoRAS, rep.RASError = true, err.Error()
	case err != nil:
		rep.RASError = err.Error()
	default:
		rep.RAS = text
	}
}
