package remote

import (
	"context"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Bounds on one answer read from a host's agent (Read): a host is not
// trusted, and whatever it prints must not become drover's memory. Each
// is far above what the answer holds for a real fleet.
const (
	hostReportLimit = 8 << 20 // drover agent runs: every run and process of a workdir
	RunRecordLimit  = 8 << 20 // a run record (adoption's look)
	sinceLimit      = 1 << 20 // drover agent since: an offset per log
)

// stopWait bounds the wait for a command stopped because ctx ended (see
// RunToEnd) to report its exit.
const stopWait = 5 * time.Second

// RunToEnd runs cmd on t's host and waits for it. When ctx ends first the
// command is stopped (SIGTERM to its group) rather than left running on
// the host, as closing its channel would: a preflight stopping leftovers
// for a run that has just lost its workdir must not go on doing so.
func RunToEnd(ctx context.Context, t cluster.Transport, cmd cluster.Cmd) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	own, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	p, err := t.Start(own, cmd)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		_ = p.Signal(syscall.SIGTERM)
		time.AfterFunc(stopWait, cancel) // a host that does not answer
	})
	defer stop()
	err = p.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Read runs args on t's host to their end and returns what they printed,
// keeping at most limit bytes: a host that prints more is stopped there,
// and the error says so (*cluster.TooMuchOutputError). said is the start
// of its stderr, escaped, for the caller's error; what names the command
// there.
func Read(ctx context.Context, t cluster.Transport, args []string, what string, limit int) (out []byte, said string, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdout := cluster.NewHeadBuffer(limit, cancel)
	stderr := cluster.NewHeadBuffer(cluster.QuoteLimit, nil)
	err = RunToEnd(ctx, t, cluster.Cmd{Args: args, Stdout: stdout, Stderr: stderr})
	if oe := stdout.Overflow(t.Host().Name, what); oe != nil {
		return nil, "", oe
	}
	if err != nil {
		return nil, stderr.Quote(cluster.QuoteLimit), err
	}
	return stdout.Bytes(), "", nil
}
