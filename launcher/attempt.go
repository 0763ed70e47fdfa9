package launcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/plan"
)

// attempt is one start of the whole group: a list of phases (see phase),
// each a type with its own state that is given what it needs of the run
// as fields (newPhases), run in this order over one attemptState:
//
//   - scan (pushPhase.scan, attempt_push.go): the code directory, locally,
//     in the background while connect and prepare run.
//   - connect (connectPhase, attempt_connect.go): every host's kept
//     connection reused or the host dialled, a spare for one that stays
//     unreachable; lostdial.go bounds the first dial of a host lost in the
//     last attempt, and netcheck_preflight.go swaps out slow hosts
//     (preflight = ["net"]).
//   - prepare (preparePhase, attempt_prepare.go): the agent installed, file
//     access and the home directory opened, the workdirs leased
//     (holdWorkdirs). What the attempt learns of a host here is an
//     attemptHost of its own; the pooled hostConn keeps only what outlives
//     the attempt.
//   - adopt (adopt.go): a live group that a restarted drover attaches to,
//     in place of every phase below.
//   - check (checkPhase, phase.go), four phases side by side, since each
//     waits on the network and not on the others: push (pushPhase,
//     attempt_push.go; slurm.go: hosts that share a workdir), checkpoint
//     (ckptPhase, checkpoints.go: the newest checkpoint staged on every
//     host), plan (planPhase, attempt_plan.go: the health gate in
//     health.go, the GPUs in attempt_gpus.go, plan.Build; replanned with
//     the checkpoint and what preflight found) and preflight
//     (preflightPhase, attempt_preflight.go: leftovers stopped, the
//     interface found, the program and ports checked, one agent command a
//     host).
//   - supervise (attempt_supervise.go, supervisor.go): every process
//     started, watched (firstevent.go, hang.go, health.go, detached.go)
//     and stopped, with its checkpoints copied meanwhile (ckptPhase.watch).
//   - after a failure: what the crash-loop breaker learns
//     (ckptPhase.checkProgress, progress.go), and the GPUs released
//     (attempt_supervise.go).
//
// The attempt itself owns only what its phases share and what follows
// them: the outcome, the keep-out of an unhealthy host, the membership
// note.
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
	hosts, err := a.r.replaced.participants(a.cfg)
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
		ckpt:      &ckptPhase{phaseEnv: env, now: r.now, record: func(job string) (*checkpoint.Record, error) { return r.checkpointRecord(r.logRoot, job) }, progress: &a.progress},
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

// connectFailure ends an attempt whose hosts could not all be connected.
// connect already waited host_wait (restarts) or tried the spares: an
// unreachable host is final here.
func (a *attempt) connectFailure(ctx context.Context, err error) attemptOutcome {
	if ctx.Err() != nil {
		return interrupted()
	}
	out := a.setupFailure(err)
	out.kind, out.permanent = outcomeSetupFailed, true
	return out
}

// findings judges a health read of host: the counters, and the Xids not
// judged before. idle says the read was taken before the attempt started.
func (a *attempt) findings(rep gpu.HostReport, idle bool) []gpu.Finding {
	rep.XIDs = a.r.newXIDs(rep.Host, rep.XIDs)
	return gpu.CheckHealth(rep, gpu.HealthPolicy{IgnoreXIDs: a.cfg.Job.IgnoreXIDs, Idle: idle})
}

// warn prints a finding as a warning event; a critical one names the
// mode that lets it train.
func (a *attempt) warn(f gpu.Finding) {
	note := ""
	if f.Critical {
		note = ` (critical; health = "warn" lets it train)`
	}
	a.r.events.printf("%s: warning: GPU health: %s%s", a.prefix(), f, note)
}

// keepOut handles a gate's *UnhealthyError: each host is fenced and a
// spare takes its place, and the attempt is set up again (outcomeFenced);
// without a spare for every one the run fails before anything starts.
func (a *attempt) keepOut(ue *UnhealthyError) attemptOutcome {
	a.r.pool.forgetPrepared()
	for _, f := range ue.Findings {
		a.r.fence(f.Host, f)
		spare, ok := a.standIn(f.Host)
		if !ok {
			err := fmt.Errorf("%w; health = \"enforce\" keeps %s out and no spare host is left: fix the GPU, add a host with spare = true, or set health = \"warn\" to train on it anyway",
				ue, f.Host)
			a.r.events.printf("%s: %v", a.prefix(), err)
			return attemptOutcome{kind: outcomeSetupFailed, err: err, exitCode: -1, permanent: true}
		}
		a.r.events.printf("%s: %s kept out (GPU health: %s %s); replaced by spare %s", a.prefix(), f.Host, f.GPU, f.What, spare)
	}
	return attemptOutcome{kind: outcomeFenced, exitCode: -1, err: ue}
}

// standIn makes the first free spare stand in for host (a participant,
// or a spare standing in for one) from the next setup on, and returns its
// name; false when no spare is free.
func (a *attempt) standIn(host string) (string, bool) {
	spare, ok := a.freeSpare()
	if !ok {
		return "", false
	}
	a.r.replaced[a.r.replaced.standsFor(host)] = spare.Name
	return spare.Name, true
}

// freeSpare is the first spare host that is not in use, replaced or
// fenced.
func (a *attempt) freeSpare() (config.Host, bool) {
	used := map[string]bool{}
	for _, v := range a.r.replaced {
		used[v] = true
	}
	for _, h := range a.cfg.Hosts {
		if _, bad := a.r.fencedFor(h.Name); h.Spare && !used[h.Name] && !bad {
			return h, true
		}
	}
	return config.Host{}, false
}

// noteMembership says which hosts left (or joined) the inventory since the
// last attempt that ran, and what that did to the world size: an edit of
// the inventory between attempts silently changed the job's size before.
func (a *attempt) noteMembership(pl *plan.Plan) {
	inv := map[string]bool{}
	for _, h := range a.cfg.Hosts {
		inv[h.Name] = true
	}
	var names []string
	for _, h := range pl.Hosts {
		names = append(names, h.Name)
	}
	prev := a.r.lastHosts
	if prev != nil {
		var left, joined []string
		for _, h := range prev {
			if !inv[h] {
				left = append(left, h)
			}
		}
		spares := slices.Collect(maps.Values(a.r.replaced))
		for _, h := range names {
			if !slices.Contains(prev, h) && !slices.Contains(spares, h) {
				joined = append(joined, h)
			}
		}
		for _, c := range []struct {
			hosts []string
			what  string
		}{{left, "left"}, {joined, "joined"}} {
			if len(c.hosts) > 0 {
				a.r.events.printf("%s: %s %s the inventory: world size %d -> %d", a.prefix(), strings.Join(c.hosts, ", "), c.what, a.r.lastWorld, len(pl.Processes))
			}
		}
	}
	a.r.lastHosts, a.r.lastWorld = names, len(pl.Processes)
}

// takeSharedCheckpoints reads the record's copy on every host of an
// adopted run and takes the one that knows of most checkpoints, when it
// knows of more than this machine's record. What a host sends is
// bounded and checked (checkpoint.Record.AdoptShared): every location in
// it must be in the job's checkpoint directories or the mirror.
func (a *attempt) takeSharedCheckpoints(ctx context.Context, conns []*attemptHost) {
	rec, err := a.r.checkpointRecord(a.r.logRoot, a.cfg.Job.Name)
	if err != nil {
		return
	}
	places := checkpoint.Places{Hosts: map[string][]string{}, Mirror: a.cfg.Job.CheckpointMirror}
	for _, c := range conns {
		wd := remoteAbs(c.home, c.host.Workdir)
		places.Hosts[c.host.Name] = []string{remoteAbs(wd, a.cfg.Job.CheckpointDir), checkpoint.OwnDir(wd)}
	}
	for _, c := range conns {
		if ctx.Err() != nil || c.fs == nil {
			return
		}
		file := path.Join(remoteAbs(c.home, c.host.Workdir), agent.RunDir(a.r.runID), sharedRecordFile)
		b, err := readSmall(c.fs, file, checkpoint.MaxSharedRecord+1)
		if err != nil {
			continue // none there: an older drover, or a host added since
		}
		took, err := rec.AdoptShared(b, c.host.Name, places)
		if err != nil {
			a.r.events.printf("%s: %v; not taken", a.prefix(), err)
			continue
		}
		if took {
			a.r.events.printf("%s: took run %s's checkpoint record from %s (newest: %s)", a.prefix(), a.r.runID, c.host.Name, orNone(a.r.newestCheckpoint()))
		}
	}
	a.r.connMu.Lock()
	a.r.sharedChanges = -1 // write the adopted record back to every host
	a.r.connMu.Unlock()
}
