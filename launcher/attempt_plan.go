package launcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/plan"
)

// The plan phase of an attempt (see attempt): built once the agents are
// installed, from the health gate (healthGate, below) and the GPUs
// (selectGPUs, below), then again with the checkpoint and what preflight
// found.

// planPhase waits for the agents, runs the health gate beside the GPU
// probe and builds the plan (without the checkpoint: see checkPhase).
type planPhase struct {
	phaseEnv
	restarts int
	// runID is the run's id (DROVER_RUN_ID): the same in every attempt.
	runID string
	// prevWorld is the world size of the last attempt that ran (0 before
	// one did): a plan of another size tells the processes so.
	prevWorld int
	// fenced, findings and warn are the run's health state as the
	// attempt reads it (healthState.fencedFor, attempt.findings, warn).
	fenced   func(host string) (gpu.Finding, bool)
	findings func(rep gpu.HostReport, idle bool) []gpu.Finding
	warn     func(gpu.Finding)
	// in is the plan's input; gpuBefore, per host, the processes on each
	// GPU before the attempt (not the job's), which waitGPUsReleased
	// reads after a failure.
	in        plan.PlanInput
	gpuBefore map[string]map[int][]int
	// leasing is how the attempt leases its GPUs (gpuLeasing); holds
	// are the sessions that hold them until cleanup.
	leasing gpuLeasing
	// queued records where the attempt waits in a host's GPU queue
	// (runner.noteQueued; "" once the wait there is over).
	queued  func(conns []*hostConn, host, line string)
	holdsMu sync.Mutex
	holds   []*hostio.GPUHold
	// kept takes the holds at cleanup (the run's keptGPUs); nil gives
	// them back then.
	kept *keptGPUs
}

func (p *planPhase) name() string { return "agent, probe, plan" }

// cleanup hands the attempt's GPU leases to the run (kept), which
// gives them back once the next attempt holds its own or the run ends.
func (p *planPhase) cleanup() {
	p.holdsMu.Lock()
	holds := p.holds
	p.holds = nil
	p.holdsMu.Unlock()
	if p.kept != nil {
		p.kept.keep(holds)
		return
	}
	releaseHolds(holds)
}

func releaseHolds(holds []*hostio.GPUHold) {
	forEach(holds, func(h *hostio.GPUHold) error { h.Release(); return nil })
}

// keptGPUs are the GPU lease sessions of a run's attempts that are over,
// kept across its restart: the next attempt leases again, joining the
// leases they still hold (gpulease.Take, and without waiting in the
// queue: gpulease.Keeps), before they are given back (release). So no
// other run, a queued one above all, takes the run's GPUs between two of
// its attempts.
type keptGPUs struct {
	mu    sync.Mutex
	holds []*hostio.GPUHold
}

func (k *keptGPUs) keep(holds []*hostio.GPUHold) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holds = append(k.holds, holds...)
}

// release gives back every kept lease.
func (k *keptGPUs) release() {
	k.mu.Lock()
	holds := k.holds
	k.holds = nil
	k.mu.Unlock()
	releaseHolds(holds)
}

// run leaves the plan in st.plan.
func (p *planPhase) run(ctx context.Context, st *attemptState) error {
	var err error
	p.in, st.plan, err = p.planAttempt(ctx, st.conns, st.cfg, st.installed)
	return err
}

// planAttempt waits for the agents (installed), probes the GPUs and
// builds the plan, without a checkpoint to resume from. in keeps what the
// plan was built from: the checkpoint and preflight's findings
// (interfaces, moved ports) build it again from in (replan).
func (p *planPhase) planAttempt(ctx context.Context, conns []*attemptHost, cfg *config.Config, installed <-chan error) (plan.PlanInput, *plan.Plan, error) {
	if err := <-installed; err != nil {
		return plan.PlanInput{}, nil, err
	}
	// The health gate and the GPU probe are a command each per host:
	// side by side, the gate costs no round trip of its own.
	gate := make(chan error, 1)
	go func() { gate <- p.healthGate(ctx, conns) }()
	gpus, err := p.selectGPUs(ctx, conns)
	if gerr := <-gate; gerr != nil {
		return plan.PlanInput{}, nil, gerr // a spare may stand in: before the probe's error
	}
	if err != nil {
		return plan.PlanInput{}, nil, err
	}
	homes := map[string]string{}
	for _, c := range conns {
		homes[c.host.Name] = c.home
	}
	in := plan.PlanInput{Config: cfg, GPUs: gpus, RestartCount: p.restarts, HostHome: homes,
		RunID: p.runID, Attempt: p.n, PrevWorldSize: p.prevWorld}
	pl, err := plan.Build(in)
	return in, pl, err
}

// replan builds the plan again from in (which has the checkpoint now)
// with what preflight found: each host's interface, and free ports in
// place of held ones.
func (p *planPhase) replan(pl *plan.Plan, found preflightFound) (*plan.Plan, error) {
	in := p.in
	in.Ifaces = found.ifaces
	in.BasePorts = map[string]int{}
	for _, proc := range pl.Processes {
		base, ok := found.moved[proc.Host.Name]
		if !ok {
			continue
		}
		if p.cfg.Job.Framework == config.TensorFlow {
			in.BasePorts[proc.Address] = base
		} else {
			in.MasterPort = base
		}
	}
	return plan.Build(in)
}

// The GPUs of an attempt (see attempt): probed and selected for the plan,
// and, after a failed attempt, waited for until the job's processes have
// released them.

// selectGPUs probes hosts with gpus = "auto" and applies the selection
// rules; GPU-less hosts need no probe. Hosts with pinned GPUs are probed
// too, only to learn which processes were on their GPUs before the attempt
// (see waitGPUsReleased).
func (p *planPhase) selectGPUs(ctx context.Context, conns []*attemptHost) (map[string]plan.HostGPUs, error) {
	var mu sync.Mutex
	out := map[string]plan.HostGPUs{}
	p.gpuBefore = map[string]map[int][]int{}
	since := p.leasing.start()
	defer p.leasing.stop()
	err := forEach(conns, func(c *attemptHost) error {
		hg := plan.HostGPUs{Indices: c.host.GPUs.List, Probed: true}
		var before map[int][]int
		if c.host.GPUs.Auto || len(c.host.GPUs.List) > 0 {
			rep := remote.ProbeInstalled(ctx, c.t, c.agent)
			before = gpu.Pids(rep)
			if c.host.GPUs.Auto {
				sel, err := gpu.Select(c.host.Name, hostio.GPUPolicy(c.host, p.cfg.Job), rep)
				if err != nil {
					return fmt.Errorf("select GPUs on %s: %w", hostLabel(c.host), err)
				}
				hg.Indices = sel.Indices
				if len(sel.Indices) == 0 && rep.Reason != "" {
					p.events.printf("%s: %s has no usable GPU (%s); planning it as a CPU host", p.prefix(), c.host.Name, rep.Reason)
				}
			}
			if n := p.cfg.Job.GPUsPerHost; p.leasing.off && n > 0 && len(hg.Indices) > n {
				hg.Indices = hg.Indices[:n] // unleased (Slurm): gpus_per_host all the same
			} else if len(hg.Indices) > 0 && !p.leasing.off {
				taken, err := p.leaseGPUs(ctx, c, hostio.LeaseCandidates(hg.Indices, rep), since, conns)
				if err != nil {
					return err
				}
				hg.Indices = taken
			}
		}
		mu.Lock()
		out[c.host.Name] = hg
		p.gpuBefore[c.host.Name] = before
		mu.Unlock()
		return nil
	})
	if p.kept != nil {
		p.kept.release() // the attempt before's: this one holds its own now
	}
	return out, err
}

// gpuReleaseWait bounds the wait for a stopped attempt's GPUs to be free.
const gpuReleaseWait = 30 * time.Second

func orUnknown(s string) string {
	if s == "" {
		return "name unknown"
	}
	return s
}

// The GPU health gate (the job's health key): before each attempt every
// GPU host's agent reads its GPUs' health (gpu.Health, and the Xids of
// the kernel log or NVML's events), and while the attempt runs the agent
// of each host's first GPU process reads it every healthEvery into a file
// that drover reads over its file access (no SSH session of its own). Under "enforce" a host with a critical finding is kept
// out of the group for the rest of the run, as a lost host is: before
// the attempt a spare takes its place (without one the run fails before
// anything starts); while it runs the group stops and restarts without
// it, counted against max_host_failures. Warnings, and every finding
// under "warn", are events. The gate is here; the reads while the group
// runs are the supervisor's (supervisor_watch.go), and what the run
// remembers across attempts (Xids judged, hosts fenced) is healthState
// (runner.go).

// UnhealthyError is a gate that kept hosts out of the group: Findings
// holds the first critical finding of each, in host order.
type UnhealthyError struct {
	Findings []gpu.Finding
}

func (e *UnhealthyError) Error() string {
	parts := make([]string, len(e.Findings))
	for i, f := range e.Findings {
		parts[i] = f.String()
	}
	return "GPU health: " + strings.Join(parts, "; ")
}

// hasGPUs says whether h may have GPUs to read: gpus = [] is a CPU host.
func hasGPUs(h config.Host) bool { return h.GPUs.Auto || len(h.GPUs.List) > 0 }

// healthGate reads every GPU host's health before the attempt starts.
// Under "enforce" hosts with a critical finding (or fenced earlier in the
// run) make it return an *UnhealthyError; a host whose health cannot be
// read is let through with an event (the probe decides about its GPUs).
func (p *planPhase) healthGate(ctx context.Context, conns []*attemptHost) error {
	mode := p.cfg.Job.Health
	if mode == config.HealthOff {
		return nil
	}
	bad := make([]*gpu.Finding, len(conns))
	forEach(conns, func(c *attemptHost) error {
		i := slices.Index(conns, c)
		if f, ok := p.fenced(c.host.Name); ok && mode == config.HealthEnforce {
			bad[i] = &f
			return nil
		}
		if !hasGPUs(c.host) {
			return nil
		}
		rep, err := c.client().Health(ctx, 0)
		if err != nil {
			p.events.printf("%s: %v; going on without its health", p.prefix(), err)
			return nil
		}
		for _, f := range p.findings(rep, true) {
			if f.Critical && mode == config.HealthEnforce {
				if bad[i] == nil {
					bad[i] = &f
				}
				p.events.printf("%s: GPU health: %s", p.prefix(), f)
				continue
			}
			p.warn(f)
		}
		return nil
	})
	ue := &UnhealthyError{}
	for _, f := range bad {
		if f != nil {
			ue.Findings = append(ue.Findings, *f)
		}
	}
	if len(ue.Findings) == 0 {
		return nil
	}
	return ue
}

// The GPU leases of an attempt (package gpulease): once the GPUs are
// selected, each host's agent leases them, and holds them until the
// attempt is over (cleanup). GPUs other runs lease are skipped by
// gpus = "auto" and an error for pinned ones; with --queue the attempt
// waits for them in each host's queue instead.

// gpuLeasing is what the run says about leasing: the run and its
// controller, and --queue and --queue-timeout.
type gpuLeasing struct {
	// off: inside a Slurm allocation, whose GPUs Slurm gave this job
	// alone (and where a step that outlives the probe would hold them).
	off     bool
	dir     string
	job     string
	runID   string
	queue   bool
	timeout time.Duration
	// clock is the attempt's --queue-timeout (start to stop).
	clock *queueClock
}

// start sets the attempt's --queue-timeout clock (not running yet: see
// queueClock) and returns its place in the hosts' queues: now, the same
// on every host.
func (l *gpuLeasing) start() time.Time {
	var timeout time.Duration
	if l.queue {
		timeout = l.timeout
	}
	l.clock = newQueueClock(timeout)
	return time.Now().UTC()
}

func (l *gpuLeasing) stop() { l.clock.stop() }

// QueueTimeoutError is a --queue run that waited --queue-timeout for its
// GPUs; Last is where it waited on the host, and who holds the GPUs
// (queueLine).
type QueueTimeoutError struct {
	Waited time.Duration
	Last   string
}

func (e *QueueTimeoutError) Error() string {
	return fmt.Sprintf("waited --queue-timeout %s for the GPUs; %s", e.Waited, e.Last)
}

// queueClock is an attempt's --queue-timeout. It runs from the first
// answer of any of its hosts that the attempt waits in its queue, not
// from the attempt's start: the GPU probe and the lease agents' start
// (seconds, on a loaded host) are no wait in a queue, and a timeout that
// passed before any host answered had no holder to name.
type queueClock struct {
	timeout time.Duration // 0: no bound
	// ctx ends once the timeout has passed (its cause the
	// *QueueTimeoutError) or the clock stopped (context.Canceled).
	ctx     context.Context
	cancel  context.CancelCauseFunc
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

func newQueueClock(timeout time.Duration) *queueClock {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &queueClock{timeout: timeout, ctx: ctx, cancel: cancel}
}

// waiting starts the clock, the first time a host says the attempt
// waits in its queue.
func (q *queueClock) waiting() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.timeout <= 0 || q.timer != nil || q.stopped {
		return
	}
	q.timer = time.AfterFunc(q.timeout, func() { q.cancel(&QueueTimeoutError{Waited: q.timeout}) })
}

// stop ends the clock once the attempt's GPUs are selected.
func (q *queueClock) stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.cancel(nil)
}

// expired is the timeout's error once it has passed, else nil.
func (q *queueClock) expired() *QueueTimeoutError {
	var qt *QueueTimeoutError
	if errors.As(context.Cause(q.ctx), &qt) {
		return qt
	}
	return nil
}

// hold runs a host's lease session (hold, whose say gets each line that
// says where the attempt waits in the host's queue; each goes to note)
// until it ends, or the clock's timeout ends the wait: then with a
// *QueueTimeoutError naming the host's last line, who holds its GPUs. A
// host that has said nothing yet when the timeout passes (its agent
// slower to start than another host's wait) is waited for until it says
// where it waits, or holds the GPUs, or fails: the error always names the
// holders. Lines said once the wait is over are dropped: they would
// print a wait that is over and record the ended run queued again.
func (q *queueClock) hold(ctx context.Context, hold func(ctx context.Context, say func(line string)) (*hostio.GPUHold, error), note func(line string)) (*hostio.GPUHold, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex // the session's reader says, the caller reads
	var last string
	over := false
	end := func() { // once the timeout passed and the host said where it waits
		mu.Lock()
		said := last != ""
		mu.Unlock()
		if qt := q.expired(); qt != nil && said {
			cancel(qt)
		}
	}
	defer context.AfterFunc(q.ctx, end)()
	h, err := hold(ctx, func(line string) {
		mu.Lock()
		if over {
			mu.Unlock()
			return
		}
		last = line
		note(line) // under mu: nothing is noted once hold returned
		mu.Unlock()
		q.waiting()
		end()
	})
	mu.Lock()
	over = true
	line := last
	mu.Unlock()
	var qt *QueueTimeoutError
	if err != nil && errors.As(context.Cause(ctx), &qt) {
		return h, &QueueTimeoutError{Waited: qt.Waited, Last: line}
	}
	return h, err
}

// leaseGPUs leases cands (in order) on c's host and keeps the session
// for cleanup: gpus_per_host of them, else every free one (auto, at
// least min_gpus) or all (pinned).
func (p *planPhase) leaseGPUs(ctx context.Context, c *attemptHost, cands []gpulease.Candidate, since time.Time, conns []*attemptHost) ([]int, error) {
	n, least := p.cfg.Job.GPUsPerHost, hostio.GPUPolicy(c.host, p.cfg.Job).MinGPUs
	if !c.host.GPUs.Auto && n == 0 {
		n = len(cands)
	}
	if n > 0 {
		least = n
	}
	host, _ := os.Hostname()
	o := gpulease.HoldOptions{Dir: cmp.Or(p.leasing.dir, gpulease.DefaultDir), Candidates: cands, N: n, Min: least, Queue: p.leasing.queue, Hosts: len(conns),
		Me: gpulease.Holder{Job: p.cfg.Job.Name, RunID: p.leasing.runID, Host: host, PID: os.Getpid(), Since: since}}
	h, err := p.leasing.clock.hold(ctx, func(ctx context.Context, say func(string)) (*hostio.GPUHold, error) {
		return hostio.HoldGPUs(ctx, c.client(), o, func(ev gpulease.Event) { say(queueLine(c.host.Name, ev)) })
	}, func(line string) {
		p.events.printf("%s: %s", p.prefix(), line)
		if p.queued != nil {
			p.queued(hostConns(conns), c.host.Name, line)
		}
	})
	var qt *QueueTimeoutError
	timedOut := errors.As(err, &qt)
	if p.queued != nil && ctx.Err() == nil && !timedOut {
		p.queued(hostConns(conns), c.host.Name, "")
	}
	if h != nil {
		p.holdsMu.Lock()
		p.holds = append(p.holds, h)
		p.holdsMu.Unlock()
	}
	if timedOut {
		return nil, err
	}
	return h.GPUsOrNil(), err
}

// leaseFiles are the GPU lease files the attempt holds on host, which
// its processes there hold too.
func (p *planPhase) leaseFiles(host string) []string {
	if p == nil {
		return nil // an attempt made without phases (tests)
	}
	p.holdsMu.Lock()
	defer p.holdsMu.Unlock()
	for _, h := range p.holds {
		if h.Host == host {
			return h.Files
		}
	}
	return nil
}

// queueLine says a host's place in its GPU queue and who holds what.
func queueLine(host string, ev gpulease.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "waiting for GPUs on %s (--queue): place %d of %d", host, ev.Position, ev.Waiters)
	for _, w := range ev.Ahead {
		fmt.Fprintf(&b, "; ahead: %s", w.Holder)
	}
	for _, h := range ev.Holders {
		fmt.Fprintf(&b, "; GPU %d leased by %s", h.GPU, h)
	}
	return b.String()
}
