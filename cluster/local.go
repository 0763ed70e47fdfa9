package cluster

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

	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/cluster/sigclean"
)

// localTransport runs commands on this machine with os/exec, for hosts with
// transport = "local" (single-machine jobs, tests). It behaves like the SSH
// transport: Dir relative to $HOME, Env added to the environment, the same
// ExitError for exit codes and signals.
type localTransport struct {
	host Endpoint
	home string
}

// NewLocal returns the transport for a local host; its home directory is
// the current user's $HOME.
func NewLocal(h Endpoint) (Transport, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("connect to %s (local): %w", h.Name, err)
	}
	return newLocal(h, home), nil
}

// newLocal lets tests root a local host somewhere other than $HOME.
func newLocal(h Endpoint, home string) *localTransport {
	return &localTransport{host: h, home: home}
}

func (t *localTransport) Host() Endpoint { return t.host }

// Start runs cmd in its own process group so that cancelling ctx kills the
// whole tree it started, not just the direct child.
func (t *localTransport) Start(ctx context.Context, cmd Cmd) (Process, error) {
	if err := checkCmd(cmd); err != nil {
		return nil, fmt.Errorf("start on %s: %w", t.host.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start %s on %s: %w", cmd.name(), t.host.Name, err)
	}
	args := cmd.Args
	if cmd.Shell != "" {
		args = []string{"/bin/sh", "-c", cmd.Shell}
	}
	c := exec.Command(args[0], args[1:]...)
	c.Dir = t.home
	if cmd.Dir != "" {
		dir := cmd.Dir
		if rest, ok := strings.CutPrefix(dir, "~/"); ok {
			dir = rest
		}
		if filepath.IsAbs(dir) {
			c.Dir = dir
		} else {
			c.Dir = filepath.Join(t.home, dir)
		}
	}
	c.Env = os.Environ()
	names := make([]string, 0, len(cmd.Env))
	for k := range cmd.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		c.Env = append(c.Env, k+"="+cmd.Env[k])
	}
	c.Stdout, c.Stderr = cmd.Stdout, cmd.Stderr
	// Stdin goes through our own copier: os/exec's Wait would wait for its
	// copier, which never ends while the reader (drover's control channel
	// to the agent) stays open after the command exited. Like ssh's
	// Session, Wait then returns at the command's exit.
	var stdin io.WriteCloser
	if cmd.Stdin != nil {
		var err error
		if stdin, err = c.StdinPipe(); err != nil {
			return nil, fmt.Errorf("start %s on %s: %w", cmd.name(), t.host.Name, err)
		}
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// As sshd does, whatever drover inherited (SIGHUP ignored under
	// nohup, signals blocked by its parent): default dispositions, an
	// empty mask.
	sigclean.Command(c)
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s on %s: %w", cmd.name(), t.host.Name, err)
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(stdin, cmd.Stdin)
			stdin.Close()
		}()
	}
	p := &localProcess{host: t.host.Name, c: c, ctx: ctx, exited: make(chan struct{})}
	p.stop = context.AfterFunc(ctx, func() { _ = p.Signal(syscall.SIGKILL) })
	return p, nil
}

type localProcess struct {
	host   string
	c      *exec.Cmd
	ctx    context.Context
	stop   func() bool
	exited chan struct{} // closed once Wait has reaped the group leader
	reaped sync.Once
}

// Signal signals the process group that Start created. Once the leader is
// reaped its pid, and so the group id, may be reused by an unrelated
// process, so from then on Signal does nothing.
func (p *localProcess) Signal(sig syscall.Signal) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := syscall.Kill(-p.c.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s on %s: %w", unix.SignalName(sig), p.host, err)
	}
	return nil
}

func (p *localProcess) Wait() error {
	err := p.c.Wait()
	p.reaped.Do(func() { close(p.exited) })
	if !p.stop() && p.ctx.Err() != nil {
		return fmt.Errorf("%s: command cancelled: %w", p.host, p.ctx.Err())
	}
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("%s: %w", p.host, err)
	}
	return exitError(p.host, ee)
}

// exitError reports a local command's exit status or signal as a remote
// one is reported.
func exitError(host string, ee *exec.ExitError) *ExitError {
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &ExitError{Host: host, Code: 128 + int(ws.Signal()), Signal: strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")}
	}
	return &ExitError{Host: host, Code: ee.ExitCode()}
}

// FS is the os package rooted at the local home.
func (t *localTransport) FS(ctx context.Context) (FS, error) {
	return NewOSFS(t.home), nil
}

// Close has nothing to release: commands keep running until they exit.
func (t *localTransport) Close() error { return nil }
