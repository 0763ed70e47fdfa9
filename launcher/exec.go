package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/logstream"
)

// ExitConnectFailed is the status `drover exec` reports for a host it could
// not reach or lost mid-command, as ssh(1) does.
const ExitConnectFailed = 255

// ExecOptions describe one ad-hoc command fanned out to hosts.
type ExecOptions struct {
	Args []string
	Env  map[string]string
	// Dir is the working directory on every host ("" = home).
	Dir  string
	Dial cluster.DialOptions
	// Stdout and Stderr receive every host's output as whole lines
	// prefixed "[host] "; lines from different hosts never mix.
	Stdout, Stderr io.Writer
}

// ExecResult is how the command fared on one host.
type ExecResult struct {
	Host string
	// Code is the exit status; ExitConnectFailed when the host could not
	// be reached or was lost.
	Code int
	// Err is nil on success, an *cluster.ExitError when the command failed,
	// or the connection error.
	Err error
}

// Exec runs opts.Args on every host at once, each over its own connection
// (dialled at most opts.Dial.Parallel at a time), streams the output line by
// line and returns one result per host, in the order of hosts. A slow or
// dead host delays only its own result.
func Exec(ctx context.Context, hosts []cluster.Host, opts ExecOptions) []ExecResult {
	stdout := logstream.NewSink(discardIfNil(opts.Stdout))
	stderr := logstream.NewSink(discardIfNil(opts.Stderr))
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

func execOne(ctx context.Context, h cluster.Host, opts ExecOptions, sem chan struct{}, stdout, stderr *logstream.Sink) error {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("connect to %s: %w", h.Name, ctx.Err())
	}
	tr, err := cluster.Dial(ctx, h, opts.Dial)
	<-sem
	if err != nil {
		return err
	}
	defer tr.Close()
	prefix := "[" + h.Name + "] "
	out := logstream.NewPrefixWriter(stdout, prefix)
	errw := logstream.NewPrefixWriter(stderr, prefix)
	p, err := tr.Start(ctx, cluster.Cmd{Args: opts.Args, Env: opts.Env, Dir: opts.Dir, Stdout: out, Stderr: errw})
	if err == nil {
		err = p.Wait()
	}
	// Flush partial last lines even when the command failed: they are
	// often the error message.
	out.Close()
	errw.Close()
	return err
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
