package slurm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Options say how the slurm transport reaches a node of an allocation.
type Options struct {
	// JobID is the allocation's job id (SLURM_JOB_ID).
	JobID string
	// Helper is the command line that runs the step helper (StepMain) on a
	// node: the drover binary and "slurm-step". It must be at that path on
	// every node, as it is when drover lives on the shared filesystem.
	Helper []string
	// Home is the home directory, the same path on this machine and on
	// the nodes. Default: $HOME.
	Home string
	// Srun and Scancel are the Slurm commands; default from $PATH.
	Srun, Scancel string
}

type transport struct {
	host cluster.Endpoint
	opts Options
	// remote is set by Dial when the node does not see this machine's
	// home or workdir: file access then goes through an sftp-server in a
	// step on the node (see fs.go) instead of this machine's filesystem.
	remote bool

	mu     sync.Mutex
	fs     *cluster.CommandFS // opened on first use when remote
	closed bool
}

// New returns the transport that starts commands on host h (a node of the
// allocation, by name) as job steps: one `srun --overlap` step per command,
// pinned to the node, so steps share the allocation's resources with each
// other and with the batch script that runs drover.
func New(h cluster.Endpoint, o Options) (cluster.Transport, error) {
	if o.JobID == "" {
		return nil, fmt.Errorf("connect to %s (slurm): no job id: drover must run inside the allocation (SLURM_JOB_ID)", h.Name)
	}
	if len(o.Helper) == 0 {
		return nil, fmt.Errorf("connect to %s (slurm): no step helper", h.Name)
	}
	if o.Home == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("connect to %s (slurm): %w", h.Name, err)
		}
		o.Home = home
	}
	if o.Srun == "" {
		o.Srun = "srun"
	}
	if o.Scancel == "" {
		o.Scancel = "scancel"
	}
	return &transport{host: h, opts: o}, nil
}

func (t *transport) Host() cluster.Endpoint { return t.host }

// FS is this machine's filesystem rooted at the home when the node shares
// it (the usual case), else the node's own files over SFTP (remoteFS).
func (t *transport) FS(ctx context.Context) (cluster.FS, error) {
	if !t.remote {
		return cluster.NewOSFS(t.opts.Home), nil
	}
	return t.remoteFS(ctx)
}

// SharesFS reports whether the node sees this machine's home and the
// host's workdir (Dial checked), so that a file written here is there:
// the launcher then pushes the code once for every such node, or not at
// all when the workdir is the code directory.
func (t *transport) SharesFS() bool { return !t.remote }

// Close stops the step that serves the node's files, if one was started;
// each command is its own srun and has nothing to release.
func (t *transport) Close() error {
	t.mu.Lock()
	t.closed = true
	f := t.fs
	t.fs = nil
	t.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.Close()
}

func (t *transport) dir(d string) string {
	d, _ = strings.CutPrefix(d, "~/")
	switch {
	case d == "" || d == "~":
		return t.opts.Home
	case filepath.IsAbs(d):
		return d
	}
	return filepath.Join(t.opts.Home, d)
}

// srunArgs is the step for cmd: one task on this node, overlapping the
// allocation's other steps, quiet so that srun's own notes stay out of the
// command's stderr.
func (t *transport) srunArgs(cmd cluster.Cmd, raw bool) []string {
	args := []string{t.opts.Srun, "--overlap", "--jobid=" + t.opts.JobID, "--nodelist=" + t.host.Address,
		"--nodes=1", "--ntasks=1", "--quiet", "--kill-on-bad-exit=0", "--job-name=drover", "--export=ALL"}
	if raw {
		// slurmstepd passes output on in whole lines unless told not to:
		// a binary protocol (SFTP) would wait for a newline that never
		// comes.
		args = append(args, "--unbuffered")
	}
	if cmd.Stdin == nil {
		args = append(args, "--input=none")
	}
	// The helper changes directory itself: srun's --chdir falls back to
	// /tmp when the directory is missing, and a command must not run
	// anywhere but where it was asked to.
	args = append(args, t.opts.Helper...)
	args = append(args, "--chdir="+t.dir(cmd.Dir), "--")
	if cmd.Shell != "" {
		return append(args, "/bin/sh", "-c", cmd.Shell)
	}
	return append(args, cmd.Args...)
}

// Start runs srun in its own process group, so that a Ctrl-C meant for
// drover reaches the step only as drover decides (Signal), never through
// srun's own forwarding.
func (t *transport) Start(ctx context.Context, cmd cluster.Cmd) (cluster.Process, error) {
	return t.start(ctx, cmd, false)
}

// start is Start, with output passed on as it comes (raw) rather than in
// whole lines.
func (t *transport) start(ctx context.Context, cmd cluster.Cmd, raw bool) (cluster.Process, error) {
	if err := cluster.CheckCmd(cmd); err != nil {
		return nil, fmt.Errorf("start on %s: %w", t.host.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start on %s: %w", t.host.Name, err)
	}
	args := t.srunArgs(cmd, raw)
	c := exec.Command(args[0], args[1:]...)
	c.Env = os.Environ()
	names := make([]string, 0, len(cmd.Env))
	for k := range cmd.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		c.Env = append(c.Env, k+"="+cmd.Env[k])
	}
	p := &process{t: t, ctx: ctx, stepKnown: make(chan struct{}), exited: make(chan struct{})}
	p.filter = &stderrFilter{out: cmd.Stderr, onStep: p.setStep}
	c.Stdout, c.Stderr = cmd.Stdout, p.filter
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	c.WaitDelay = 5 * time.Second
	var stdin io.WriteCloser
	if cmd.Stdin != nil {
		var err error
		if stdin, err = c.StdinPipe(); err != nil {
			return nil, fmt.Errorf("start %s on %s: %w", args[0], t.host.Name, err)
		}
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start srun for %s: %w", t.host.Name, err)
	}
	p.c = c
	if stdin != nil {
		// Our own copier, as the local transport has: Wait must return at
		// the step's end even while Stdin stays open.
		go func() {
			_, _ = io.Copy(stdin, cmd.Stdin)
			stdin.Close()
		}()
	}
	p.stop = context.AfterFunc(ctx, p.kill)
	return p, nil
}

// stepAnnounceWait bounds how long Signal waits for a starting step to
// name itself; a step that Slurm has not started yet may wait much longer
// (resources busy), and is stopped through srun instead.
const stepAnnounceWait = 5 * time.Second

type process struct {
	t      *transport
	c      *exec.Cmd
	ctx    context.Context
	stop   func() bool
	filter *stderrFilter

	mu        sync.Mutex
	step      string        // "JOB.STEP" once the helper announced it
	stepKnown chan struct{} // closed when step is set
	exited    chan struct{} // closed when srun has been reaped
	reaped    sync.Once
}

func (p *process) setStep(step string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.step == "" {
		p.step = step
		close(p.stepKnown)
	}
}

// Signal sends sig to every process of the step with scancel: Slurm's
// process tracking finds the command and all it started, wherever they
// moved. Before the step has announced itself Signal waits a little for
// it, then signals srun, which forwards the signal to the step or, before
// there is one, gives up starting it. After srun exited it does nothing.
func (p *process) Signal(sig syscall.Signal) error {
	select {
	case <-p.stepKnown:
	case <-p.exited:
		return nil
	case <-time.After(stepAnnounceWait):
		if err := syscall.Kill(-p.c.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %s to srun for %s: %w", signalName(sig), p.t.host.Name, err)
		}
		return nil
	}
	p.mu.Lock()
	step := p.step
	p.mu.Unlock()
	if sig == syscall.SIGSTOP || sig == syscall.SIGCONT {
		return p.scancel(sig, step)
	}
	// Slurm signals a step's processes one by one, not as a group as
	// killpg does: between two of them a shell could see its child die
	// and run on (`sleep 301; echo survived`), or reap a killed child and
	// exit 137 before its own SIGKILL. Stopped first, no process runs
	// until every one has the signal pending; SIGCONT then lets them take
	// it (SIGKILL needs no SIGCONT).
	if err := p.scancel(syscall.SIGSTOP, step); err != nil {
		return err
	}
	if err := p.scancel(sig, step); err != nil {
		return err
	}
	if sig == syscall.SIGKILL {
		return nil
	}
	return p.scancel(syscall.SIGCONT, step)
}

func (p *process) scancel(sig syscall.Signal, step string) error {
	out, err := exec.Command(p.t.opts.Scancel, "--quiet", "--signal="+signalName(sig), step).CombinedOutput()
	if err != nil {
		select {
		case <-p.exited:
			return nil // the step ended meanwhile
		default:
		}
		// Slurm 22.05's scancel delivers a step's signal and then fails
		// with "Invalid job id specified"; it says the same of a step that
		// has ended. Either way there is nothing left to signal.
		if strings.Contains(string(out), "Invalid job id specified") {
			return nil
		}
		return fmt.Errorf("signal %s to step %s on %s: scancel: %w: %s", signalName(sig), step, p.t.host.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// kill ends a cancelled command: the step with SIGKILL, and srun with it.
func (p *process) kill() {
	select {
	case <-p.stepKnown:
		_ = p.Signal(syscall.SIGKILL)
	default:
	}
	select {
	case <-p.exited:
	default:
		_ = syscall.Kill(-p.c.Process.Pid, syscall.SIGKILL)
	}
}

// Wait reports the command's status from the helper's trailer. Without
// one, srun's own status says what happened: a step killed with SIGKILL
// (the helper with it) reports 128+9, and anything else means the command's
// fate is unknown (the node or the step was lost), which callers treat as
// a lost connection.
func (p *process) Wait() error {
	err := p.c.Wait()
	p.reaped.Do(func() { close(p.exited) })
	ferr := p.filter.drain(true)
	host := p.t.host.Name
	if !p.stop() && p.ctx.Err() != nil {
		return fmt.Errorf("%s: command cancelled: %w", host, p.ctx.Err())
	}
	if st := p.filter.st; st.known {
		switch {
		case st.signal != 0:
			return &cluster.ExitError{Host: host, Code: st.code, Signal: signalName(st.signal)}
		case st.code != 0:
			return &cluster.ExitError{Host: host, Code: st.code}
		}
		return ferr
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 128 && ee.ExitCode() < 128+65 {
		sig := syscall.Signal(ee.ExitCode() - 128)
		return &cluster.ExitError{Host: host, Code: ee.ExitCode(), Signal: signalName(sig)}
	}
	if err == nil {
		err = errors.New("srun exited 0")
	}
	return fmt.Errorf("%s: step of job %s ended without the command's status (%v): %w", host, p.t.opts.JobID, err, cluster.ErrConnectionLost)
}
