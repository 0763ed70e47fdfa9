package top

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/straggler"
)

// `drover top`: one SSH connection per host, kept for as long as the view
// is open, with one `drover agent top --every 1s` session on it streaming
// samples. A host whose last sample is older than Stale shows as
// unreachable; one that sends nothing for topRedial has its connection
// dropped and dialled again, so a host that comes back reappears.

// Stale is how old a host's last sample may be before the view calls
// the host unreachable: three missed samples.
const Stale = 3 * time.Second

// topRedial is how long a host may send nothing before its connection is
// closed and dialled anew (a pulled cable never closes it).
const topRedial = 6 * time.Second

// Host is one host as `drover top` shows it.
type Host struct {
	Host      string `json:"host"`
	Reachable bool   `json:"reachable"`
	// Error says why the host is unreachable or what failed last.
	Error string `json:"error,omitempty"`
	// LastSeen is when its last sample arrived (this machine's clock).
	LastSeen time.Time       `json:"last_seen,omitzero"`
	GPUs     []agent.TopGPU  `json:"gpus"`
	GPUError string          `json:"gpu_error,omitempty"`
	Procs    []agent.TopProc `json:"procs"`
	// Health holds findings of GPUs not listed (a lost one).
	Health []agent.TopFinding `json:"health,omitempty"`
}

// View is what `drover top` shows: every host of the job, in file
// order.
type View struct {
	Job   string    `json:"job"`
	Time  time.Time `json:"time"`
	Hosts []Host    `json:"hosts"`
	// Stragglers are the processes named far slower than their peers
	// (stragglers.go), each as a line.
	Stragglers []string `json:"stragglers,omitempty"`
}

// Options say what to watch.
type Options struct {
	Job   config.Job
	Hosts []config.Host
	Dial  cluster.DialOptions
	// Bin is the drover binary whose directory holds the agents.
	Bin string
	// Every is the time between samples.
	Every time.Duration
}

// Watcher holds the hosts' latest samples; View reads them.
type Watcher struct {
	job   string
	now   func() time.Time
	hosts []*topHost
	// sampled is signalled, without blocking, at any host's sample.
	sampled chan struct{}
	// named is what the straggler watch names now (stragglers.go).
	mu    sync.Mutex
	named []string
}

type topHost struct {
	mu    sync.Mutex
	state Host
	// seen is signalled, without blocking, at each sample or failure.
	seen chan struct{}
	// sampled is the Watcher's.
	sampled chan struct{}
}

// Watch starts watching every host until ctx ends.
func Watch(ctx context.Context, o Options) *Watcher {
	if o.Every <= 0 {
		o.Every = time.Second
	}
	w := &Watcher{job: o.Job.Name, now: time.Now, sampled: make(chan struct{}, 1)}
	agents := remote.FindAgents(o.Bin)
	for _, h := range o.Hosts {
		th := &topHost{state: Host{Host: h.Name, Error: "connecting"}, seen: make(chan struct{}, 1), sampled: w.sampled}
		w.hosts = append(w.hosts, th)
		go th.watch(ctx, h, o, agents)
	}
	go w.stragglers(ctx, straggler.Policy{Factor: o.Job.Straggler.Factor, ClockFactor: o.Job.Straggler.ClockFactor})
	return w
}

// View is every host's latest state; a host silent for Stale is
// unreachable.
func (w *Watcher) View() View {
	now := w.now()
	w.mu.Lock()
	v := View{Job: w.job, Time: now, Stragglers: w.named}
	w.mu.Unlock()
	for _, th := range w.hosts {
		th.mu.Lock()
		s := th.state
		th.mu.Unlock()
		if s.Reachable && now.Sub(s.LastSeen) > Stale {
			s.Reachable = false
			s.Error = fmt.Sprintf("no answer for %s", now.Sub(s.LastSeen).Round(time.Second))
		}
		if s.GPUs == nil {
			s.GPUs = []agent.TopGPU{}
		}
		if s.Procs == nil {
			s.Procs = []agent.TopProc{}
		}
		v.Hosts = append(v.Hosts, s)
	}
	return v
}

// WaitFirst waits until every host has sent a sample or failed once, or
// ctx ends: what `top --once` shows.
func (w *Watcher) WaitFirst(ctx context.Context) {
	for _, th := range w.hosts {
		select {
		case <-th.seen:
		case <-ctx.Done():
			return
		}
	}
}

// WaitRates waits, after WaitFirst, until every process that reports a
// step also has a step rate (RatesKnown), or window or ctx ends: the agent
// computes a rate from two samples whose steps differ, and the first
// sample of a session has none, so `top --once` would never show one.
// With samples a second apart, a window of two or three seconds gives a
// job that steps at least every second its rate; a slower one shows "-".
func (w *Watcher) WaitRates(ctx context.Context, window time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	for !RatesKnown(w.View()) {
		select {
		case <-w.sampled:
		case <-ctx.Done():
			return
		}
	}
}

// RatesKnown reports whether every process of a reachable host that
// reports a step has a step rate.
func RatesKnown(v View) bool {
	for _, h := range v.Hosts {
		if !h.Reachable {
			continue
		}
		for _, p := range h.Procs {
			if p.Step != nil && p.StepRate == nil {
				return false
			}
		}
	}
	return true
}

func (th *topHost) signal() {
	select {
	case th.seen <- struct{}{}:
	default:
	}
}

// signalSample tells WaitRates that a sample came.
func (th *topHost) signalSample() {
	if th.sampled == nil {
		return
	}
	select {
	case th.sampled <- struct{}{}:
	default:
	}
}

func (th *topHost) fail(err error) {
	th.mu.Lock()
	th.state.Reachable = false
	th.state.Error = err.Error()
	th.mu.Unlock()
	th.signal()
}

// watch dials h, installs the agent and streams its samples, again after
// each failure, until ctx ends.
func (th *topHost) watch(ctx context.Context, h config.Host, o Options, agents remote.Agents) {
	for ctx.Err() == nil {
		err := th.stream(ctx, h, o, agents)
		if ctx.Err() != nil {
			return
		}
		th.fail(err)
		if hostio.Sleep(ctx, o.Every) != nil {
			return
		}
	}
}

// stream runs one connection's session until it fails or falls silent.
func (th *topHost) stream(ctx context.Context, h config.Host, o Options, agents remote.Agents) error {
	dopts := o.Dial
	if dopts.ConnectTimeout <= 0 || dopts.ConnectTimeout > topRedial {
		dopts.ConnectTimeout = topRedial
	}
	t, err := cluster.Dial(ctx, h.Endpoint(), dopts)
	if err != nil {
		return err
	}
	defer t.Close()
	bin, err := remote.Install(ctx, t, agents)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	outR, outW := io.Pipe()
	stderr := cluster.NewHeadBuffer(4096, nil)
	ao := agent.TopOptions{Workdir: h.Workdir, Every: o.Every, Heartbeat: topHeartbeat}
	p, err := remote.Client{T: t, Path: bin}.Top(ctx, ao, cluster.Cmd{Stdin: stdinR, Stdout: outW, Stderr: stderr})
	if err != nil {
		return fmt.Errorf("start drover agent top on %s: %w", h.Name, err)
	}
	go heartbeat(ctx, stdinW, o.Every)
	go func() {
		werr := p.Wait()
		outW.CloseWithError(fmt.Errorf("drover agent top on %s ended: %v %s", h.Name, werr, stderr.Quote(4096)))
	}()
	lines := make(chan lineOrErr)
	go readLines(ctx, outR, lines)
	silent := time.NewTimer(topRedial)
	defer silent.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-silent.C:
			return fmt.Errorf("%s sent nothing for %s; dialling again", h.Name, topRedial)
		case l := <-lines:
			if l.err != nil {
				return l.err
			}
			var s agent.TopSample
			if err := json.Unmarshal(l.line, &s); err != nil {
				return fmt.Errorf("read drover agent top's sample from %s: %w", h.Name, err)
			}
			th.mu.Lock()
			th.state = Host{Host: h.Name, Reachable: true, LastSeen: time.Now(), GPUs: s.GPUs, GPUError: s.GPUError, Procs: s.Procs, Health: s.Health}
			th.mu.Unlock()
			th.signal()
			th.signalSample()
			silent.Reset(topRedial)
		}
	}
}

// topHeartbeat is how long a host's sampler goes on without hearing from
// drover (agent.Options.Heartbeat).
const topHeartbeat = 10 * time.Second

// heartbeat writes a newline to w every interval until ctx ends or a
// write fails (the session is gone).
func heartbeat(ctx context.Context, w io.Writer, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := w.Write([]byte("\n")); err != nil {
				return
			}
		}
	}
}

// lineOrErr is a line read, or why reading stopped.
type lineOrErr struct {
	line []byte
	err  error
}

// readLines sends each line of r to out, then the error that ended it,
// until ctx ends.
func readLines(ctx context.Context, r io.Reader, out chan<- lineOrErr) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	send := func(l lineOrErr) bool {
		select {
		case out <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for sc.Scan() {
		if !send(lineOrErr{line: append([]byte(nil), sc.Bytes()...)}) {
			return
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	send(lineOrErr{err: err})
}
