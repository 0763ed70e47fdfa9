package launcher

// The run's state, one floor above result.go: the runner holds what
// outlives an attempt (the clock, events, the connection pool, the
// leases, the spares standing in, and what the checkpoint, lost-host,
// detached-run and GPU-health concerns remember between attempts). The
// files above it name it and add its behaviour; it names none of them,
// so that an attempt, a phase or the supervisor can hold it without a
// cycle. The run loop that makes the attempts is the top file, run.go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/lease"
	"github.com/droverhq/drover/launcher/plan"
)

// runner is one run's state across its attempts (see the top of this
// file); run.go drives it.
type runner struct {
	opts RunOptions
	now  func() time.Time
	// mono is the time since the run started on the monotonic clock,
	// which a step of the wall clock does not move: what measures how
	// long something took or was silent (hangs, heartbeats) reads it.
	mono   func() time.Duration
	sleep  func(ctx context.Context, d time.Duration) error
	events *eventLog
	// agents are the binaries hosts get as their agent (found once, next
	// to opts.AgentBinary). Finding them hashes each (tens of
	// milliseconds), so it runs beside the config, the scan and the dials
	// rather than before them; the installs wait for it.
	agents func() remote.Agents

	mu       sync.Mutex
	table    procTable    // the summary, under mu
	replaced replacements // unreachable host name -> spare name
	// logRoot is the directory holding every run's logs (runs/).
	logRoot string
	// leases are this run's hold on the hosts' workdirs.
	leases *lease.Holder
	// pool keeps the connections from one attempt to the next.
	pool *connPool
	// lastHosts and lastWorld are the hosts and world size of the last
	// attempt that got as far as its plan (see noteMembership).
	lastHosts []string
	lastWorld int
	// left are the hosts left out of the group (min_hosts: see
	// connectPhase.shrink); fullPlan is the last plan that ran with
	// none left out, and lastInv the inventory's hosts then.
	left     map[string]bool
	fullPlan *plan.Plan
	lastInv  map[string]bool
	// logFail: a failing local log disk is reported once per run.
	logFail *logFailure
	// setUp names the hosts this run set up (setupPhase).
	setUp setupDone
	// imaged names the hosts that have the job's container image
	// (containerPhase).
	imaged setupDone
	// keptGPUs are the GPU leases of the attempt before, kept across a
	// restart (planPhase.cleanup) until the next one holds its own.
	keptGPUs keptGPUs
	ckptState
	lostState
	detachState
	healthState
}

func newRunner(opts RunOptions) *runner {
	r := &runner{opts: opts, table: procTable{procs: map[string]*ProcSummary{}}, replaced: replacements{}, pool: newConnPool(), left: map[string]bool{}}
	found := make(chan remote.Agents, 1)
	go func() { found <- remote.FindAgents(opts.AgentBinary) }()
	r.agents = sync.OnceValue(func() remote.Agents { return <-found })
	// One read of known_hosts and the ssh config shared by every attempt's
	// dials, so that what drover skips is warned about once per run.
	r.opts.Dial = r.opts.Dial.Shared()
	start := time.Now()
	r.mono = func() time.Duration { return time.Since(start) }
	r.now = opts.Now
	if r.now == nil {
		r.now = time.Now
	}
	r.sleep = opts.Sleep
	if r.sleep == nil {
		r.sleep = hostio.Sleep
	}
	ev := opts.Events
	if ev == nil {
		ev = io.Discard
	}
	r.events = &eventLog{w: ev, now: r.now}
	r.logFail = &logFailure{events: r.events}
	r.abort = make(chan struct{})
	r.runID = opts.RunID
	if r.runID == "" {
		r.runID = NewRunID(r.now())
	}
	if r.opts.Out == nil {
		r.opts.Out = io.Discard
	}
	return r
}

// register adds p to the summary in plan order.
func (r *runner) register(p plan.Process) *ProcSummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.table.registerLocked(p)
}

func (r *runner) record(p plan.Process, exit string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.table.registerLocked(p)
	s.Host = p.Host.Name
	s.Attempts++
	s.Exit = exit
	s.Duration += d
	s.Cause = ""
}

// recordCause notes why p's attempt went wrong, and when drover saw it,
// for the summary.
func (r *runner) recordCause(p plan.Process, cause string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.table.registerLocked(p)
	s.Cause, s.CauseAt = cause, at
}

// createLog creates a process's local log file (see logFileWriter). Its
// sink serialises the writes, so the writer needs no lock of its own.
func (r *runner) createLog(file string) io.WriteCloser {
	f, err := os.Create(file)
	if err != nil {
		r.logFail.report(path.Dir(path.Dir(file)), err)
		f = nil
	}
	return &logFileWriter{f: f, fail: r.logFail}
}

// checkLeasesSoon starts checkLeases now and returns its wait: a failed
// attempt starts it as it begins to stop its group, so that the check the
// restart needs costs it no round trip of its own. A lease taken over
// after the check is still found: by the next attempt's lease, and by
// every host's agent before it stops a leftover.
func (r *runner) checkLeasesSoon(ctx context.Context) func() error {
	done := make(chan error, 1)
	go func() { done <- checkLeases(ctx, r.leases, r.events) }()
	return func() error { return <-done }
}

// startLeases gives the run its workdir leases (see package lease). The
// returned context ends, with a *lease.LostError as its cause, when
// another run takes a workdir over with --force; release gives every
// lease back and must run after the last process stopped.
func startLeases(ctx context.Context, job string, now time.Time, force bool, events *eventLog) (_ context.Context, _ *lease.Holder, release func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	leases := lease.New(lease.Self(job, now), lease.Options{
		Force: force,
		Logf:  events.printf,
		Lost:  func(err error) { events.printf("%v", err); cancel(err) },
	})
	return ctx, leases, func() {
		leases.Release()
		cancel(nil)
	}
}

// checkLeases reads every lease of the run before a restart (see
// lease.Holder.Check): the attempt that just failed may have failed
// because another run took the workdirs over with --force and stopped
// its processes as leftovers, and restarting would stop that run's
// processes in turn. A lease taken is a *lease.LostError, said as an
// event: the run then ends without restarting.
func checkLeases(ctx context.Context, leases *lease.Holder, events *eventLog) error {
	if lost := lostLease(ctx, nil); lost != nil {
		return lost // a renewal found it first, and said so
	}
	err := leases.Check(ctx)
	var le *lease.LostError
	if !errors.As(err, &le) {
		return nil
	}
	events.printf("%v", err)
	return err
}

// lostLease is the *lease.LostError that ended the run, when one did:
// the cause of ctx (a renewal found the lease taken) or err (an attempt
// found it taken: a newer forced run's lease at Acquire, or a host's
// agent refusing to stop leftovers for a run that no longer holds it).
func lostLease(ctx context.Context, err error) error {
	var le *lease.LostError
	if cause := context.Cause(ctx); errors.As(cause, &le) {
		return cause
	}
	if errors.As(err, &le) {
		return err
	}
	return nil
}

// IsLost reports whether err is (or wraps) a workdir another run took
// over: the run failed (exit status 1) without restarting.
func IsLost(err error) bool {
	var le *lease.LostError
	return errors.As(err, &le)
}

// IsHeld reports whether err is (or wraps) a workdir held by another live
// run, which the CLI reports like a configuration error (exit status 2).
func IsHeld(err error) bool {
	var he *lease.HeldError
	return errors.As(err, &he)
}

// IsGPUsLeased reports whether err is (or wraps) GPUs that other runs
// lease (without --queue) or a --queue run that waited --queue-timeout:
// the run fails without restarting.
func IsGPUsLeased(err error) bool {
	var be *gpulease.BusyError
	var qt *QueueTimeoutError
	return errors.As(err, &be) || errors.As(err, &qt)
}

// adoption is the live group of an earlier detached run to take over.
type adoption struct {
	rec agent.RunRecord
	// gone says whose supervision ended, and when, for the event.
	gone string
}

// controllerTimeout is how long the agents of a detached group keep it
// with no supervisor attached: the job's controller_timeout for a
// detached run; for a foreground run that adopted a group, the
// foreground heartbeat, as its own agents have. A foreground supervisor
// promises that Ctrl-C, or its death (SIGKILL, a closed terminal),
// leaves nothing behind, and the group it adopted is then its group:
// the attach clients switch the adopted agents to this timeout too.
func (r *runner) controllerTimeout(cfg *config.Config) time.Duration {
	if r.opts.Detach {
		return cfg.Job.ControllerTimeout
	}
	return heartbeatTimeout
}

// appendLog opens a process's local log for appending (an adopted run's).
func (r *runner) appendLog(file string) *logFileWriter {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		r.logFail.report(filepath.Dir(filepath.Dir(file)), err)
		f = nil
	}
	return &logFileWriter{f: f, fail: r.logFail}
}

// NewRunID is a fresh run id: the start time and a random suffix, so that
// ids sort by age and two machines never pick the same one.
func NewRunID(now time.Time) string { return agent.NewRunID(now) }

// detachState is the runner's part of a detached run.
type detachState struct {
	runID     string
	runLogDir string
	// adopting is the earlier run this one takes over (nil: none), and
	// firstAttempt the number of this run's first attempt (the adopted
	// one's, else 1).
	adopting     *adoption
	firstAttempt int
	// lookFirst makes a foreground run's first attempt look for a group
	// to adopt beside its setup (lookForGroup).
	lookFirst bool
	// detachedGroup says the group runs under detached agents (see
	// agent/detach.go): a detached run's, or the one a foreground run
	// adopted (see adopt.go). Its processes are then attached to, and the
	// run's record is kept on the hosts.
	detachedGroup bool
	readyOnce     sync.Once
	// abort is closed when `drover stop --abort` asked for the group to
	// be killed at once.
	abort     chan struct{}
	abortOnce sync.Once
	// stopRequested ends the run's context when `drover stop` asked
	// (watchStopRequest, stopAsked).
	stopRequested context.CancelCauseFunc
	// conns are the newest attempt's connections, over which the record
	// is written.
	connMu  sync.Mutex
	conns   []*hostConn
	runRec  agent.RunRecord
	started time.Time

	// recSeq numbers the record's versions; recWritten is, by host, the
	// newest written there, and recHostMu (host name to *sync.Mutex)
	// orders the writes to one host: a foreground run's are not waited
	// for, and an older one must never land after a newer.
	recSeq     int
	recWritten map[string]int
	recHostMu  sync.Map
}

// ckptState is the runner's part of checkpointing: the record, loaded once.
type ckptState struct {
	ckptOnce sync.Once
	ckptRec  *checkpoint.Record
	ckptErr  error
	// sharedChanges is the record's change count last written to the
	// hosts (shareCheckpoints).
	sharedChanges int
	// freshSince is the first seq of the record a --fresh run resumes
	// from, set by its first attempt (ckptPhase.stage).
	freshSince int
	// dataStaged are the hosts this run staged the [[data]] sets onto
	// (dataPhase): a spare that joins later is staged then.
	dataStaged map[string]bool
}

// checkpointRecord loads the job's record once per run.
func (r *ckptState) checkpointRecord(root, job string) (*checkpoint.Record, error) {
	r.ckptOnce.Do(func() {
		r.ckptRec, r.ckptErr = checkpoint.LoadRecord(checkpoint.RecordPath(root, job), job)
	})
	return r.ckptRec, r.ckptErr
}

// lostState is the runner's memory of the hosts whose connection was lost
// (no reply to keepalives) in the attempt that just ended.
type lostState struct {
	lostMu sync.Mutex
	lost   map[string]bool
}

// noteLost records that host's connection was lost.
func (l *lostState) noteLost(host string) {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	if l.lost == nil {
		l.lost = map[string]bool{}
	}
	l.lost[host] = true
}

// takeLost returns the hosts lost since the last call and forgets them.
func (l *lostState) takeLost() map[string]bool {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	out := l.lost
	l.lost = nil
	return out
}

// healthState is the runner's memory of GPU health across attempts.
type healthState struct {
	healthMu sync.Mutex
	// xidsSeen holds, per host, the Keys of the Xids already judged; the
	// run's first read of a host only records them (they happened
	// before the run, and the counters say whether they left damage).
	xidsSeen map[string]map[string]bool
	// fenced are the hosts kept out for the rest of the run.
	fenced map[string]gpu.Finding
}

// newXIDs returns the Xids of xs not seen on host before, and marks them.
func (h *healthState) newXIDs(host string, xs []gpu.XID) []gpu.XID {
	h.healthMu.Lock()
	defer h.healthMu.Unlock()
	if h.xidsSeen == nil {
		h.xidsSeen = map[string]map[string]bool{}
	}
	seen, known := h.xidsSeen[host]
	if !known {
		seen = map[string]bool{}
		h.xidsSeen[host] = seen
	}
	var out []gpu.XID
	for _, x := range xs {
		if !seen[x.Key] {
			seen[x.Key] = true
			if known {
				out = append(out, x)
			}
		}
	}
	return out
}

// fence keeps host out for the rest of the run.
func (h *healthState) fence(host string, f gpu.Finding) {
	h.healthMu.Lock()
	defer h.healthMu.Unlock()
	if h.fenced == nil {
		h.fenced = map[string]gpu.Finding{}
	}
	if _, ok := h.fenced[host]; !ok {
		h.fenced[host] = f
	}
}

func (h *healthState) fencedFor(host string) (gpu.Finding, bool) {
	h.healthMu.Lock()
	defer h.healthMu.Unlock()
	f, ok := h.fenced[host]
	return f, ok
}

// participants are the non-spare hosts in file order, with hosts that were
// replaced earlier swapped for their spare.
// replacements are a run's hosts replaced by a spare: the unreachable (or
// unhealthy, or slow) host's name -> its spare's.
type replacements map[string]string

func (r replacements) participants(cfg *config.Config) ([]config.Host, error) {
	byName := map[string]config.Host{}
	for _, h := range cfg.Hosts {
		byName[h.Name] = h
	}
	var out []config.Host
	for _, h := range cfg.Hosts {
		if h.Spare {
			continue
		}
		if sp, ok := r[h.Name]; ok {
			s, ok := byName[sp]
			if !ok {
				return nil, fmt.Errorf("spare %s, which replaced %s, is no longer in %s", sp, h.Name, cfg.InventoryPath)
			}
			s.Spare = false // it stands in for h: the plan gives it h's ranks
			out = append(out, s)
			continue
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no hosts to run on in %s", cfg.InventoryPath)
	}
	return out, nil
}

// standsFor is the inventory host that name stands in for: itself, or the
// host a spare of that name replaced.
func (r replacements) standsFor(name string) string {
	for orig, sp := range r {
		if sp == name {
			return orig
		}
	}
	return name
}

// Drover pings every agent this often; an agent that hears nothing for
// heartbeatTimeout stops its group (drover died or the link is down).
const (
	heartbeatEvery   = time.Second
	heartbeatTimeout = 6 * time.Second
)
