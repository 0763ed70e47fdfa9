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
// push, checkpoint, plan and preflight run side by side (checkPhase),
// since each waits on the network and not on the others.
type attempt struct {
	r        *runner
	cfg      *config.Config
	n, total int
	restarts int
	logDir   string
	// adopt, on the first attempt of a run that adopts a live group,
	// is that group (see adopt.go).
	adopt *adoption
	// progress is what the crash-loop breaker learns (progress.go).
	progress attemptProgress
	// ph are the attempt's phases (newPhases), made when it runs.
	ph phases
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
	a.ph = newPhases(a)
	defer a.ph.cleanup()
	st := &attemptState{hosts: hosts, steps: a.stepTimer(), scan: a.ph.push.scan()}
	defer func() { <-st.scan.done }() // nothing of the attempt outlives it
	// The connections are the runner's (connPool): they outlive the
	// attempt, and the next one reuses them.
	if err := runPhase(ctx, a.ph.connect, st); err != nil {
		return a.connectFailure(ctx, err)
	}
	adoptable := func() bool { return false }
	if a.r.lookFirst {
		a.r.lookFirst = false
		adoptable = lookForGroup(ctx, st.pooled)
	}
	err = runPhase(ctx, a.ph.prepare, st)
	found := adoptable()
	if err != nil {
		<-st.installed
		return a.setupFailure(err) // a *lease.HeldError says the run must not go on
	}
	if found {
		<-st.installed
		return attemptOutcome{kind: outcomeAdoptable} // see runner.attempts
	}
	if a.adopt != nil {
		return a.adoptGroup(ctx, st)
	}
	err = runPhase(ctx, a.ph.check, st)
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
	return a.supervised(ctx, st.conns, st.plan)
}

// supervised runs the planned group to its end with its checkpoints
// copied meanwhile, and after a failure learns what the breaker needs and
// waits for the GPUs to be released.
func (a *attempt) supervised(ctx context.Context, conns []*attemptHost, pl *plan.Plan) attemptOutcome {
	a.progress.ran = true
	a.noteMembership(pl)
	stopWatch := a.ph.ckpt.watch(ctx, conns)
	out := a.supervise(ctx, conns, pl)
	stopWatch()
	if out.kind != outcomeSucceeded && out.kind != outcomeInterrupted {
		a.ph.ckpt.checkProgress(ctx, conns)
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
	connect   *connectPhase
	prepare   *preparePhase
	push      *pushPhase
	ckpt      *ckptPhase
	plan      *planPhase
	preflight *preflightPhase
	// check is push, ckpt, plan and preflight side by side.
	check *checkPhase
}

// newPhases makes a's phases: this is where the run's parts are handed to
// each phase, so that no phase holds the runner.
func newPhases(a *attempt) phases {
	r := a.r
	env := phaseEnv{n: a.n, total: a.total, cfg: a.cfg, events: r.events}
	ph := phases{
		connect: &connectPhase{phaseEnv: env, clock: clock{now: r.now, sleep: r.sleep}, dial: sshDialer{}, opts: r.opts.Dial,
			pool: r.pool, lost: r.takeLost, replaced: r.replaced, agents: r.agents,
			reload: func() (*config.Config, error) { return config.Load(r.opts.JobPath, r.opts.loadOptions()) }},
		prepare:   &preparePhase{phaseEnv: env, agents: r.agents, opts: r.opts.Dial, dial: sshDialer{}, pool: r.pool, leases: r.leases},
		push:      &pushPhase{phaseEnv: env, now: r.now, logRoot: r.logRoot, cacheDir: r.opts.PushCacheDir},
		ckpt:      &ckptPhase{phaseEnv: env, now: r.now, record: r.checkpointRecord, progress: &a.progress},
		plan:      &planPhase{phaseEnv: env, restarts: a.restarts, fenced: r.fencedFor, findings: a.findings, warn: a.warn},
		preflight: &preflightPhase{phaseEnv: env, leases: r.leases},
	}
	ph.check = &checkPhase{push: ph.push, ckpt: ph.ckpt, plan: ph.plan, preflight: ph.preflight}
	return ph
}

// cleanup cleans up after every phase, last first.
func (ph phases) cleanup() {
	for _, p := range []phase{ph.check, ph.preflight, ph.plan, ph.ckpt, ph.push, ph.prepare, ph.connect} {
		p.cleanup()
	}
}

// runPhase runs p on st and notes in events.log when it was done (a
// phase composed of others notes its parts itself).
func runPhase(ctx context.Context, p phase, st *attemptState) error {
	err := p.run(ctx, st)
	if n := p.name(); n != "" {
		st.steps(n)
	}
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
