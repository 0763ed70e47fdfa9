package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/logstream"
)

// ExitConnectFailed is the status `drover exec` reports for a host it could
// not reach or lost mid-command, as ssh(1) does.
const ExitConnectFailed = 255

// ExitTimedOut is the status `drover exec` reports for a host whose command
// ran past ExecOptions.Timeout and was stopped, as timeout(1) does.
const ExitTimedOut = 124

// ErrExecTimeout marks a host whose command ran past ExecOptions.Timeout
// and was stopped; its result's Code is ExitTimedOut.
var ErrExecTimeout = errors.New("timed out")

// DefaultExecGrace is how long an interrupted `drover exec` command has
// between SIGTERM and SIGKILL: ad-hoc commands rarely need long to clean
// up, and whoever pressed Ctrl-C is waiting.
const DefaultExecGrace = 5 * time.Second

// execKillWait bounds the wait for a host to report the exit of a command
// that was sent SIGKILL; only a server that ignores signal requests, or a
// dead link, takes that long.
const execKillWait = 5 * time.Second

// ExecOptions describe one ad-hoc command fanned out to hosts.
type ExecOptions struct {
	// Args is the command. A single element is a shell command line, run by
	// each host's login shell as `ssh host LINE` and pdsh run it, so
	// `nvidia-smi | grep MiB` works as typed. Several elements are a
	// program and its arguments, each passed exactly as given (no word
	// splitting, globbing or expansion), as with exec.
	Args []string
	Env  map[string]string
	// Dir is the working directory on every host ("" = home).
	Dir  string
	Dial cluster.DialOptions
	// Stdout and Stderr receive every host's output as whole lines
	// prefixed "[host] "; lines from different hosts never mix.
	Stdout, Stderr io.Writer
	// Timeout, when positive, bounds each host's command, counted from its
	// start: one past it is stopped as an interrupt would stop it, and its
	// result is ErrExecTimeout. A fleet command that hangs on one broken
	// host (nvidia-smi on a GPU that fell off the bus) then cannot hold up
	// the answer from all the others.
	Timeout time.Duration
	// Grace is how long commands get between SIGTERM and SIGKILL once ctx
	// is cancelled or Timeout passes; 0 means DefaultExecGrace.
	Grace time.Duration
	// Hard, once closed, ends the grace at once: SIGKILL (the second
	// Ctrl-C).
	Hard <-chan struct{}
}

// execCmd is opts' command for the transport: a shell line or argv.
func (opts ExecOptions) execCmd() cluster.Cmd {
	c := cluster.Cmd{Env: opts.Env, Dir: opts.Dir}
	if len(opts.Args) == 1 {
		c.Shell = opts.Args[0]
	} else {
		c.Args = opts.Args
	}
	return c
}

// ExecResult is how the command fared on one host.
type ExecResult struct {
	Host string
	// Code is the exit status; ExitConnectFailed when the host could not
	// be reached or was lost, ExitTimedOut when the command ran past
	// ExecOptions.Timeout.
	Code int
	// Err is nil on success, an *cluster.ExitError when the command failed,
	// or the connection error.
	Err error
}

// Exec runs opts.Args on every host at once, each over its own connection
// (dialled at most opts.Dial.Parallel at a time), streams the output line by
// line and returns one result per host, in the order of hosts. A slow or
// dead host delays only its own result.
//
// Cancelling ctx stops the commands rather than abandoning them: closing an
// SSH channel leaves its command running, so every host's process group is
// sent SIGTERM, then SIGKILL after opts.Grace (or when opts.Hard closes),
// and Exec returns once the hosts report the exits.
func Exec(ctx context.Context, hosts []config.Host, opts ExecOptions) []ExecResult {
	stdout := logstream.NewSink(discardIfNil(opts.Stdout))
	stderr := logstream.NewSink(discardIfNil(opts.Stderr))
	opts.Dial = opts.Dial.Shared()
	parallel := opts.Dial.Parallel
	if parallel <= 0 {
		parallel = cluster.DefaultDialParallel
	}
	sem := make(chan struct{}, parallel)
	results := make([]ExecResult, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := execOne(ctx, h, opts, sem, stdout, stderr)
			results[i] = ExecResult{Host: h.Name, Code: exitCodeOf(err), Err: err}
		}()
	}
	wg.Wait()
	return results
}

func execOne(ctx context.Context, h config.Host, opts ExecOptions, sem chan struct{}, stdout, stderr *logstream.Sink) error {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("connect to %s: %w", h.Name, ctx.Err())
	}
	tr, err := cluster.Dial(ctx, h.Endpoint(), opts.Dial)
	<-sem
	if err != nil {
		return err
	}
	defer tr.Close()
	prefix := "[" + h.Name + "] "
	out := logstream.NewPrefixWriter(stdout, prefix)
	errw := logstream.NewPrefixWriter(stderr, prefix)
	cmd := opts.execCmd()
	cmd.Stdout, cmd.Stderr = out, errw
	if err = ctx.Err(); err != nil {
		err = fmt.Errorf("%s: interrupted before the command started: %w", h.Name, err)
	} else {
		// The command's own context is never cancelled: cancelling would
		// only close its channel. waitOrStop stops it with signals.
		var p cluster.Process
		if p, err = tr.Start(context.WithoutCancel(ctx), cmd); err == nil {
			err = waitOrStop(ctx, h.Name, p, opts)
		}
	}
	// Flush partial last lines even when the command failed: they are
	// often the error message.
	out.Close()
	errw.Close()
	return err
}

// waitOrStop waits for p; when ctx is cancelled or opts.Timeout passes
// first, it sends SIGTERM to p's process group, SIGKILL after the grace or
// when opts.Hard closes, and waits (at most execKillWait after SIGKILL) for
// the host to report the exit. It returns the exit: an *cluster.ExitError
// naming the signal after an interrupt, ErrExecTimeout after a timeout.
func waitOrStop(ctx context.Context, host string, p cluster.Process, opts ExecOptions) error {
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	var timeout <-chan time.Time
	if opts.Timeout > 0 {
		t := time.NewTimer(opts.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return stop(ctx, host, p, done, opts)
	case <-timeout:
		select {
		case err := <-done: // finished just as time ran out
			return err
		default:
		}
		err := stop(ctx, host, p, done, opts)
		how := "it exited"
		var ee *cluster.ExitError
		switch {
		case errors.As(err, &ee) && ee.Signal != "":
			how = "stopped with SIG" + ee.Signal
		case errors.As(err, &ee):
			how = fmt.Sprintf("it exited %d", ee.Code)
		case err != nil:
			how = err.Error()
		}
		return fmt.Errorf("%w after %s; %s", ErrExecTimeout, opts.Timeout, how)
	}
}

// stop is waitOrStop's way of stopping p: SIGTERM, SIGKILL after the grace
// or when opts.Hard closes, then the exit the host reports on done.
func stop(ctx context.Context, host string, p cluster.Process, done <-chan error, opts ExecOptions) error {
	grace := opts.Grace
	if grace <= 0 {
		grace = DefaultExecGrace
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
	case <-opts.Hard:
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-time.After(execKillWait):
		why := context.Cause(ctx)
		if why == nil {
			why = ErrExecTimeout
		}
		return fmt.Errorf("%s: no exit reported %s after SIGKILL; the command may still be running there: %w",
			host, execKillWait, why)
	}
}

func discardIfNil(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, ErrExecTimeout) {
		return ExitTimedOut
	}
	var ee *cluster.ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitConnectFailed
}

// WorstExitCode is the status `drover exec` exits with: the highest of the
// hosts' statuses, so any failure anywhere is visible to a calling script.
func WorstExitCode(results []ExecResult) int {
	worst := 0
	for _, r := range results {
		worst = max(worst, r.Code)
	}
	return worst
}

// WriteExecSummary writes which hosts failed and why, nothing when all
// succeeded: after interleaved output from many hosts, the failures would
// otherwise be hard to find.
func WriteExecSummary(w io.Writer, results []ExecResult) error {
	var failed []ExecResult
	for _, r := range results {
		if r.Code != 0 {
			failed = append(failed, r)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(w, "drover exec: %d of %d hosts failed:\n", len(failed), len(results)); err != nil {
		return err
	}
	for _, r := range failed {
		reason := r.Err.Error()
		var ee *cluster.ExitError
		if errors.As(r.Err, &ee) {
			reason = fmt.Sprintf("exited %d", ee.Code)
			if ee.Signal != "" {
				reason += " (SIG" + ee.Signal + ")"
			}
		}
		if _, err := fmt.Fprintf(w, "  %s: %s\n", r.Host, reason); err != nil {
			return err
		}
	}
	return nil
}
