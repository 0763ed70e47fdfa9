package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds one on_event command, or one POST.
	DefaultTimeout = 10 * time.Second
	// DefaultQueue is how many events wait for delivery before Send
	// drops them: a run makes a few events a minute at most, so only a
	// command or webhook that keeps timing out fills it.
	DefaultQueue = 64
)

// Options are a run's notification settings (the job's keys) and the
// delivery's bounds.
type Options struct {
	// OnEvent is the command run for each event (on_event); Dir is where
	// it runs (the job file's directory).
	OnEvent []string
	Dir     string
	// Webhook is the URL each event is POSTed to, in Format
	// (config.WebhookJSON or config.WebhookSlack).
	Webhook string
	Format  string
	// Notify picks the kinds sent (empty: all).
	Notify []string
	// Timeout bounds each command and each POST (0: DefaultTimeout);
	// Queue is the queue's length (0: DefaultQueue).
	Timeout time.Duration
	Queue   int
	// Logf reports a failure (once per command and webhook) and the
	// dropped events: the run's event log.
	Logf func(format string, args ...any)
}

// Notifier delivers a run's events in the background: one worker, a
// bounded queue. A nil *Notifier sends nothing.
type Notifier struct {
	opts   Options
	client *http.Client
	q      chan Event
	// ctx ends what is in flight when Close gives up waiting.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards closed against Send's send on q
	closed  bool
	dropped atomic.Int64
	// cmdFailed and hookFailed are the worker's: each failure is told
	// once per run.
	cmdFailed, hookFailed bool
}

// New starts the delivery of a run's events; nil when the job asks for
// none (no on_event, no webhook).
func New(opts Options) *Notifier {
	if len(opts.OnEvent) == 0 && opts.Webhook == "" {
		return nil
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{opts: opts, q: make(chan Event, opts.Queue), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		// No redirects: a webhook that answers with one is misconfigured,
		// and following it would send the event where the job did not say.
		client: &http.Client{Timeout: opts.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	go n.work()
	return n
}

// Send queues e for delivery when its kind is wanted, without ever
// blocking: with the queue full, e is dropped and counted (Close says how
// many), and the first drop is told at once.
func (n *Notifier) Send(e Event) {
	if n == nil || !Wanted(n.opts.Notify, e.Kind) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	select {
	case n.q <- e:
	default:
		if n.dropped.Add(1) == 1 {
			n.opts.Logf("notify: %d events wait for delivery already (on_event or webhook is slow): dropping %s and any more until they are sent", n.opts.Queue, e.Kind)
		}
	}
}

// Close delivers what is queued, waiting at most wait, then stops what is
// still in flight; it returns when the worker is done. The run's last
// event (finished, failed, stopped) is sent before the supervisor exits.
func (n *Notifier) Close(wait time.Duration) {
	if n == nil {
		return
	}
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.q)
	}
	n.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-n.done:
	case <-t.C:
		n.cancel()
		<-n.done
	}
	n.cancel()
	if d := n.dropped.Load(); d > 0 {
		n.opts.Logf("notify: %d event(s) were dropped: on_event or the webhook could not keep up", d)
	}
}

// work delivers the queue's events in order until Close.
func (n *Notifier) work() {
	defer close(n.done)
	for e := range n.q {
		if n.ctx.Err() != nil {
			n.dropped.Add(1)
			continue
		}
		if len(n.opts.OnEvent) > 0 {
			n.fail(&n.cmdFailed, "on_event", n.run(e))
		}
		if n.opts.Webhook != "" {
			n.fail(&n.hookFailed, "webhook", n.post(e))
		}
	}
}

// fail tells err once per sink (*told): a broken command or webhook is
// one line in the run's events, not one per event.
func (n *Notifier) fail(told *bool, what string, err error) {
	if err == nil || *told {
		return
	}
	*told = true
	n.opts.Logf("notify: %s failed: %v; the run goes on, and later failures of %s are not reported", what, err, what)
}

// run runs on_event with e's JSON on its stdin, in its own process group
// (killed whole at the timeout), its output kept for the error.
func (n *Notifier) run(e Event) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.Timeout)
	defer cancel()
	argv := n.opts.OnEvent
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = n.opts.Dir
	cmd.Stdin = bytes.NewReader(e.JSON())
	cmd.Env = append(os.Environ(), "DROVER_EVENT="+string(e.Kind), "DROVER_JOB="+e.Job, "DROVER_RUN_ID="+e.RunID)
	out := cluster.NewTailBuffer(512)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A child that keeps the output pipe open must not hold the worker.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("%s: no exit after %s, killed", strings.Join(argv, " "), n.opts.Timeout)
	}
	if err != nil {
		if s := strings.TrimSpace(out.String()); s != "" {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, s)
		}
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// post POSTs e to the webhook. Its errors name the webhook's host only:
// the URL's path is its secret.
func (n *Notifier) post(e Event) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.Timeout)
	defer cancel()
	host := "the webhook"
	if u, err := url.Parse(n.opts.Webhook); err == nil {
		host = u.Host
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.opts.Webhook, bytes.NewReader(Body(e, n.opts.Format)))
	if err != nil {
		return fmt.Errorf("POST to %s: %w", host, redact(err, n.opts.Webhook))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST to %s: %w", host, redact(err, n.opts.Webhook))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST to %s: %s: %s", host, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// redact is err without the webhook's URL, which net/http puts in its
// errors (*url.Error).
func redact(err error, webhook string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s", strings.ReplaceAll(ue.Err.Error(), webhook, "<webhook>"))
	}
	return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), webhook, "<webhook>"))
}
