package launcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/plan"
)

// attempt is one start of the whole group. run takes it through its
// phases in this order, and each phase's methods live in the file named:
//
//   - scan (attempt_push.go): the code directory, locally, in the
//     background while connect and prepare run.
//   - connect (attempt_connect.go): every host's kept connection reused or
//     the host dialled, a spare for one that stays unreachable; lostdial.go
//     bounds the first dial of a host lost in the last attempt, and
//     netcheck_preflight.go swaps out slow hosts (preflight = ["net"]).
//   - prepare (attempt_prepare.go): the agent installed, file access and
//     the home directory opened, the workdirs leased (run_lease.go). What
//     the attempt learns of a host here is an attemptHost of its own; the
//     pooled hostConn keeps only what outlives the attempt.
//   - adopt (adopt.go): a live group that a restarted drover attaches to,
//     in place of every phase below.
//   - push (attempt_push.go): the code to every workdir (slurm.go: hosts
//     that share one).
//   - checkpoint (checkpoints.go): the newest checkpoint staged on every
//     host.
//   - plan (attempt_plan.go): the health gate (health.go), the GPUs
//     (attempt_gpus.go) and plan.Build; replanned with the checkpoint and
//     what preflight found.
//   - preflight (attempt_preflight.go): leftovers stopped, the interface
//     found, the program and ports checked: one agent command a host.
//   - supervise (supervisor.go): every process started, watched
//     (firstevent.go, hang.go, health.go, detached.go) and stopped, with
//     its checkpoints copied meanwhile (checkpoints.go).
//   - after a failure: what the crash-loop breaker learns (progress.go),
//     and the GPUs released (attempt_gpus.go).
//
// push, checkpoint, plan and preflight run side by side (pushAndCheck),
// since each waits on the network and not on the others.
type attempt struct {
	r        *runner
	cfg      *config.Config
	n, total int
	restarts int
	logDir   string
	// gpuBefore is, per host, the processes on each GPU before the
	// attempt started (not the job's).
	gpuBefore map[string]map[int][]int
	// adopt, on the first attempt of a run that adopts a live group,
	// is that group (see adopt.go).
	adopt *adoption
	// progress is what the crash-loop breaker learns (progress.go).
	progress attemptProgress
	// leaseCheck, once the attempt failed, waits for the lease check
	// that started at the failure (see supervisor.stop).
	leaseCheck func() error
}

// run is the attempt, phase by phase (see attempt).
func (a *attempt) run(ctx context.Context) attemptOutcome {
	hosts, err := a.r.participants(a.cfg)
	if err != nil {
		return a.setupFailure(err)
	}
	steps := a.stepTimer()
	sc := a.scan()
	defer func() { <-sc.done }() // nothing of the attempt outlives it
	// The connections are the runner's (connPool): they outlive the
	// attempt, and the next one reuses them.
	ph := newPhases(a)
	st := &attemptState{hosts: hosts}
	if err := runPhase(ctx, ph.connect, st, steps); err != nil {
		return a.connectFailure(ctx, err)
	}
	pooled, cfg := st.pooled, st.cfg
	adoptable := func() bool { return false }
	if a.r.lookFirst {
		a.r.lookFirst = false
		adoptable = lookForGroup(ctx, pooled)
	}
	err = runPhase(ctx, ph.prepare, st, steps)
	conns, installed := st.conns, st.installed
	found := adoptable()
	if err != nil {
		<-installed
		return a.setupFailure(err) // a *lease.HeldError says the run must not go on
	}
	if found {
		<-installed
		return attemptOutcome{kind: outcomeAdoptable} // see runner.attempts
	}
	if a.adopt != nil {
		return a.adoptGroup(ctx, conns, cfg, installed)
	}
	pl, err := a.pushAndCheck(ctx, conns, sc, cfg, installed, steps)
	var ue *UnhealthyError
	if errors.As(err, &ue) && ctx.Err() == nil {
		return a.keepOut(ue)
	}
	if err != nil {
		return a.setupFailure(err)
	}
	if ctx.Err() != nil {
		return interrupted()
	}
	return a.supervised(ctx, conns, pl)
}

// pushAndCheck pushes the code and stages the newest checkpoint while the
// agents are installed (installed says when) and the GPUs probed, then
// preflights the plan and returns it with what preflight and the staging
// found. On a restart whose code is what the last push over the same
// connections sent, the push can only repair drift (a file edited on a
// host): the preflight then runs beside it, and again after it only when
// it repaired something or the preflight failed (it may have failed for
// what the push put back). The preflight needs nothing of the checkpoint
// (ports, program and rendezvous do not depend on it): it checks the plan
// built without it.
func (a *attempt) pushAndCheck(ctx context.Context, conns []*attemptHost, sc *scanned, cfg *config.Config, installed <-chan error, steps func(string)) (*plan.Plan, error) {
	pushed := make(chan pushOutcome, 1)
	go func() { pushed <- a.push(ctx, conns, sc); steps("push") }()
	var resume map[string]string
	var serr error
	staged := make(chan struct{})
	go func() {
		defer close(staged)
		resume, serr = a.stageCheckpoint(ctx, conns)
		steps("checkpoint")
	}()
	in, pl, err := a.planAttempt(ctx, conns, cfg, installed)
	steps("agent, probe, plan")
	var found preflightFound
	ferr := errNotChecked
	<-sc.done
	fromPush := err == nil && programsFromPush(pl, conns)
	if early := err == nil && sc.err == nil && (allPushed(conns, sc.tree.Key()) || !fromPush); early {
		found, ferr = a.preflightOwned(ctx, conns, pl)
		steps("preflight beside the push")
	}
	po := <-pushed
	<-staged
	for _, e := range []error{po.err, serr} {
		if err == nil {
			err = e
		}
	}
	if err != nil {
		return nil, err
	}
	for _, c := range conns {
		// Hosts that share a pushed workdir (Slurm) hold the tree too.
		c.pushed = sc.tree.Key()
	}
	if ferr != nil || (po.changed && fromPush) {
		found, ferr = a.preflightOwned(ctx, conns, pl)
		steps("preflight")
	}
	if ferr != nil {
		return nil, ferr
	}
	in.HostResumeFrom = resume
	a.noteResumed(resume)
	return a.replan(in, pl, found)
}

// supervised runs the planned group to its end with its checkpoints
// copied meanwhile, and after a failure learns what the breaker needs and
// waits for the GPUs to be released.
func (a *attempt) supervised(ctx context.Context, conns []*attemptHost, pl *plan.Plan) attemptOutcome {
	a.progress.ran = true
	a.noteMembership(pl)
	stopWatch := a.watchCheckpoints(ctx, conns)
	out := a.supervise(ctx, conns, pl)
	stopWatch()
	if out.kind != outcomeSucceeded && out.kind != outcomeInterrupted {
		a.checkProgress(ctx, conns)
		a.waitGPUsReleased(ctx, conns, pl)
	}
	if out.kind == outcomeSetupFailed {
		a.r.pool.forgetPrepared()
	}
	return out
}

func (a *attempt) prefix() string { return attemptPrefix(a.n, a.total) }

// attemptPrefix begins every event of attempt n of total.
func attemptPrefix(n, total int) string { return fmt.Sprintf("attempt %d/%d", n, total) }

// phases are an attempt's phases, each given what it needs of the run.
type phases struct {
	connect *connectPhase
	prepare *preparePhase
}

// newPhases makes a's phases: this is where the run's parts are handed to
// each phase, so that no phase holds the runner.
func newPhases(a *attempt) phases {
	r := a.r
	env := phaseEnv{n: a.n, total: a.total, cfg: a.cfg, events: r.events}
	clk := clock{now: r.now, sleep: r.sleep}
	return phases{
		connect: &connectPhase{phaseEnv: env, clock: clk, dial: sshDialer{}, opts: r.opts.Dial, pool: r.pool,
			lost: r.takeLost, replaced: r.replaced, agents: r.agents,
			reload: func() (*config.Config, error) { return config.Load(r.opts.JobPath, r.opts.loadOptions()) }},
		prepare: &preparePhase{phaseEnv: env, agents: r.agents, opts: r.opts.Dial, dial: sshDialer{}, pool: r.pool, leases: r.leases},
	}
}

// runPhase runs p on st and notes in events.log when it was done.
func runPhase(ctx context.Context, p phase, st *attemptState, steps func(string)) error {
	err := p.run(ctx, st)
	steps(p.name())
	return err
}

// setupFailure ends an attempt that could not start the group. Only a
// connection that died on the way counts as a lost host (worth a restart);
// a missing program, a taken port or a failed push would fail the same way
// again.
func (a *attempt) setupFailure(err error) attemptOutcome {
	a.r.events.printf("%s: %v", a.prefix(), err)
	// The next attempt dials and checks every host again.
	a.r.pool.forgetPrepared()
	return setupFailed(err)
}

// stepTimer returns a function that notes in events.log how long the
// attempt's setup took up to each step it names.
func (a *attempt) stepTimer() func(step string) {
	start := a.r.now()
	return func(step string) {
		a.r.events.debugf("%s: setup: %s done after %s", a.prefix(), step, a.r.now().Sub(start).Round(time.Millisecond))
	}
}

// errNotChecked: no preflight ran yet.
var errNotChecked = errors.New("not checked")
