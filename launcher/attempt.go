package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/elastic"
	"github.com/droverhq/drover/launcher/nccldiag"
	"github.com/droverhq/drover/launcher/notify"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/restart"
)

// attempt is one start of the whole group: a list of phases (see phase),
// each a type with its own state that is given what it needs of the run
// as fields (newPhases, run.go), run in this order over one attemptState
// (attempt.run, run.go):
//
//   - scan (pushPhase.scan, attempt_push.go): the code directory, locally,
//     in the background while connect and prepare run.
//   - connect (connectPhase, attempt_connect.go): every host's kept
//     connection reused or the host dialled, a spare for one that stays
//     unreachable; the first dial of a host lost in the last attempt is
//     bounded (dialFirst), and slow hosts are swapped out (netPreflight,
//     preflight = ["net"]).
//   - prepare (preparePhase, attempt_prepare.go): the agent installed, file
//     access and the home directory opened, the workdirs leased
//     (holdWorkdirs). What the attempt learns of a host here is an
//     attemptHost of its own; the pooled hostConn keeps only what outlives
//     the attempt.
//   - adopt (adopt.go): a live group that a restarted drover attaches to,
//     in place of every phase below.
//   - container (containerPhase, attempt_push.go): with the job's
//     container, what earlier agents left removed and the image loaded
//     or pulled on every host (package container).
//   - check (checkPhase, this file), four phases side by side, since each
//     waits on the network and not on the others: push (pushPhase,
//     attempt_push.go; slurm.go: hosts that share a workdir), checkpoint
//     (ckptPhase, checkpoints.go: the newest checkpoint staged on every
//     host), plan (planPhase, attempt_plan.go: the health gate, the
//     GPUs, plan.Build; replanned with
//     the checkpoint and what preflight found) and preflight
//     (preflightPhase, attempt_preflight.go: leftovers stopped, the
//     interface found, the program and ports checked, one agent command a
//     host).
//   - data (dataPhase, checkpoints.go): the job's [[data]] sets staged
//     (launcher/stage) onto every host this run has not staged them onto
//     yet: the first attempt's, and a spare that joined since.
//   - supervise (attempt_supervise.go, supervisor.go): every process
//     started, watched (firstevent.go; supervisor_watch.go: hang, GPU
//     health, the detached run's record, detached.go) and stopped, with
//     its checkpoints copied meanwhile (ckptPhase.watch).
//   - after a failure: what the crash-loop breaker learns
//     (ckptPhase.checkProgress, checkpoints.go), and the GPUs released
//     (waitGPUsReleased, this file).
//
// The attempt itself owns only what its phases share and what follows
// them: the outcome, the keep-out of an unhealthy host, the membership
// note. This file declares it with what the supervisor asks of it, one
// floor below supervisor.go; what runs it (attempt.run, newPhases) is in
// run.go, on top (see "Reading the package" in docs/architecture.md).
type attempt struct {
	r        *runner
	cfg      *config.Config
	n, total int
	restarts int
	logDir   string
	// adopt, on the first attempt of a run that adopts a live group,
	// is that group (see adopt.go).
	adopt *adoption
	// progress is what the crash-loop breaker learns (checkpoints.go).
	progress attemptProgress
	// ends are the processes' ends and reported says one wrote a
	// progress report: what the start-up failure rule learns
	// (restart.SameStartFailure; the supervisor notes them).
	ends     []restart.End
	reported bool
	// ph are the attempt's phases (newPhases), made when it runs.
	ph phases
	// leaseCheck, once the attempt failed, waits for the lease check
	// that started at the failure (see supervisor.stop).
	leaseCheck func() error
	// started is when the attempt began (runner.now): the causes of its
	// processes are the ones after it.
	started time.Time
	// regrow sends a host left out of the group that answers again after
	// a new checkpoint (regrow = "checkpoint": connectPhase.watchRegrow);
	// the supervisor then restarts the group to take it back.
	regrow <-chan string
}

func (a *attempt) prefix() string { return attemptPrefix(a.n, a.total) }

// phases are an attempt's phases, each given what it needs of the run.
type phases struct {
	connect   *connectPhase
	prepare   *preparePhase
	push      *pushPhase
	setup     *setupPhase
	container *containerPhase
	ckpt      *ckptPhase
	plan      *planPhase
	preflight *preflightPhase
	// check is push, ckpt, plan and preflight side by side.
	check *checkPhase
	// data stages the [[data]] sets onto hosts not staged yet in this
	// run (checkpoints.go), after check.
	data *dataPhase
}

// cleanup cleans up after every phase, last first.
func (ph phases) cleanup() {
	for _, p := range []phase{ph.data, ph.check, ph.preflight, ph.plan, ph.ckpt, ph.container, ph.setup, ph.push, ph.prepare, ph.connect} {
		p.cleanup()
	}
}

// setupFailure ends an attempt that could not start the group. Only a
// connection that died on the way counts as a lost host (worth a restart);
// a missing program, a taken port or a failed push would fail the same way
// again.
//
// The error is told once (untold): the run loop prints it as this
// attempt's failure when the run goes on, and the summary carries it when
// the run ends on it; events.log notes it here, in its place.
func (a *attempt) setupFailure(err error) attemptOutcome {
	a.r.events.debugf("%s: %v", a.prefix(), err)
	if !keepsConns(err) {
		// The next attempt dials and checks every host again.
		a.r.pool.forgetPrepared()
	}
	out := setupFailed(err)
	out.untold = true
	return out
}

// keepsConns says whether a setup that failed with err leaves the
// connections open: GPUs that other runs lease, and a run stopped or
// interrupted (a queued one above all), say nothing against them, and the
// run's record (queued until then) is written over them as it ends.
func keepsConns(err error) bool {
	return IsGPUsLeased(err) || errors.Is(err, context.Canceled)
}

// stepTimer returns a function that notes in events.log how long the
// attempt's setup took up to each step it names.
func (a *attempt) stepTimer() func(step string) {
	start := a.r.now()
	return func(step string) {
		a.r.events.debugf("%s: setup: %s done after %s", a.prefix(), step, a.r.now().Sub(start).Round(time.Millisecond))
	}
}

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
	a.r.events.notify(notify.Event{Kind: notify.Health, Attempt: a.n, Host: f.Host, Message: "warning: GPU health: " + f.String() + note})
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
			lerr := a.leaveOut(f.Host)
			if lerr == nil {
				a.r.events.printf("%s: %s kept out (GPU health: %s %s) and no spare host is left: going on without it (min_hosts = %d)", a.prefix(), f.Host, f.GPU, f.What, a.cfg.Job.MinHosts)
				continue
			}
			err := fmt.Errorf("%w; health = \"enforce\" keeps %s out and no spare host is left: fix the GPU, add a host with spare = true, set min_hosts to train on without it, or set health = \"warn\" to train on it anyway",
				ue, f.Host)
			a.r.events.printf("%s: %v", a.prefix(), err)
			return attemptOutcome{kind: outcomeSetupFailed, err: err, exitCode: -1, permanent: true}
		}
		a.r.events.printf("%s: %s kept out (GPU health: %s %s); replaced by spare %s", a.prefix(), f.Host, f.GPU, f.What, spare)
		a.r.events.notify(notify.Event{Kind: notify.Health, Attempt: a.n, Host: f.Host,
			Message: fmt.Sprintf("%s kept out (GPU health: %s %s); replaced by spare %s", f.Host, f.GPU, f.What, spare)})
	}
	return attemptOutcome{kind: outcomeFenced, exitCode: -1, err: ue}
}

// leaveOut leaves host, which the health gate keeps out and no spare can
// stand in for, out of the group for the rest of the run when min_hosts
// lets the others go on without it (elastic.Decide); else why not.
func (a *attempt) leaveOut(host string) error {
	hosts, err := a.r.replaced.participants(a.cfg)
	if err != nil {
		return err
	}
	var names []string
	for _, h := range hosts {
		if !a.r.left[h.Name] {
			names = append(names, h.Name)
		}
	}
	_, err = elastic.Decide(elastic.Input{Hosts: names, Lost: []string{host}, MinHosts: a.cfg.Job.MinHosts,
		Pinned: elastic.PinnedFor(a.cfg.Job.Framework, a.r.fullPlan, names)})
	if err != nil {
		return err
	}
	a.r.left[host] = true
	return nil
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
// last attempt that ran, which were left out of the group or rejoined it
// (min_hosts), and what that did to the world size: an edit of the
// inventory between attempts silently changed the job's size before.
func (a *attempt) noteMembership(pl *plan.Plan) {
	inv := map[string]bool{}
	for _, h := range a.cfg.Hosts {
		inv[h.Name] = true
	}
	var names []string
	for _, h := range pl.Hosts {
		names = append(names, h.Name)
	}
	world := pl.WorldSize()
	if prev := a.r.lastHosts; prev != nil {
		var left, joined, out, back []string
		for _, h := range prev {
			switch {
			case !inv[h]:
				left = append(left, h)
			case !slices.Contains(names, h) && a.r.left[h]:
				out = append(out, h)
			}
		}
		spares := slices.Collect(maps.Values(a.r.replaced))
		for _, h := range names {
			switch {
			case slices.Contains(prev, h) || slices.Contains(spares, h):
			case a.r.lastInv[h]:
				back = append(back, h)
			default:
				joined = append(joined, h)
			}
		}
		for _, c := range []struct {
			hosts []string
			what  string
		}{{left, "left the inventory"}, {joined, "joined the inventory"}, {out, "left out of the group"}, {back, "rejoined the group"}} {
			if len(c.hosts) > 0 {
				a.r.events.printf("%s: %s %s: world size %d -> %d", a.prefix(), strings.Join(c.hosts, ", "), c.what, a.r.lastWorld, world)
			}
		}
	}
	a.r.lastHosts, a.r.lastWorld, a.r.lastInv = names, world, inv
	if len(a.r.left) == 0 {
		a.r.fullPlan = pl
	}
}

// checkPhase pushes the code and stages the newest checkpoint while the
// agents are installed (st.installed says when) and the GPUs probed, runs
// the job's setup after the push where it is due (setupPhase; the
// preflight then waits for it), then preflights the plan and leaves it in st.plan with what preflight and the
// staging found. On a restart whose code is what the last push over the
// same connections sent, the push can only repair drift (a file edited on
// a host): the preflight then runs beside it, and again after it only
// when it repaired something or the preflight failed (it may have failed
// for what the push put back). The preflight needs nothing of the
// checkpoint (ports, program and rendezvous do not depend on it): it
// checks the plan built without it.
type checkPhase struct {
	push      *pushPhase
	setup     *setupPhase
	ckpt      *ckptPhase
	plan      *planPhase
	preflight *preflightPhase
}

// name is empty: the phases it is made of note their own steps.
func (p *checkPhase) name() string { return "" }

func (p *checkPhase) cleanup() {}

func (p *checkPhase) run(ctx context.Context, st *attemptState) error {
	// Setup runs in what the push left, and preflight's checks (the
	// program: .venv/bin/python) see what setup made.
	setupDue := len(p.setup.pending(st.conns)) > 0
	pushed := make(chan error, 1)
	go func() {
		err := runPhase(ctx, p.push, st)
		if err == nil {
			err = runPhase(ctx, p.setup, st)
		}
		pushed <- err
	}()
	staged := make(chan error, 1)
	go func() { staged <- runPhase(ctx, p.ckpt, st) }()
	err := runPhase(ctx, p.plan, st)
	ferr := errNotChecked
	sc, conns := st.scan, st.conns
	<-sc.done
	fromPush := err == nil && programsFromPush(st.plan, conns)
	if early := err == nil && sc.err == nil && !setupDue && (allPushed(conns, sc.tree.Key()) || !fromPush); early {
		ferr = p.preflight.run(ctx, st)
		st.steps("preflight beside the push")
	}
	perr, serr := <-pushed, <-staged
	for _, e := range []error{perr, serr} {
		if err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	for _, c := range conns {
		// Hosts that share a pushed workdir (Slurm) hold the tree too.
		c.pushed = sc.tree.Key()
	}
	if ferr != nil || (p.push.outcome.changed && fromPush) || setupDue {
		ferr = runPhase(ctx, p.preflight, st)
	}
	if ferr != nil {
		return ferr
	}
	p.plan.in.HostResumeFrom = p.ckpt.resume
	p.ckpt.noteResumed(p.ckpt.resume)
	st.plan, err = p.plan.replan(st.plan, p.preflight.found)
	return err
}

// outcomeKind is how one attempt of the whole group ended (package
// restart, whose policy decides on it): exactly one applies; the run loop
// (runner.attempts) decides on it what happens next.
type outcomeKind = restart.Kind

const (
	outcomeSucceeded   = restart.Succeeded
	outcomeFailed      = restart.Failed
	outcomeSetupFailed = restart.SetupFailed
	outcomeHostLost    = restart.HostLost
	outcomeHung        = restart.Hung
	outcomeInterrupted = restart.Interrupted
	outcomeFenced      = restart.Fenced
	outcomeAdoptable   = restart.Adoptable
	outcomeRegrow      = restart.Regrow
	outcomeReplaced    = restart.Replaced
)

// attemptOutcome is how one attempt ended and why.
type attemptOutcome struct {
	kind outcomeKind
	// err says what went wrong; nil when it succeeded or was interrupted.
	err error
	// exitCode is the first failing process's exit status; -1 when no
	// process failed by exiting (setup, lost host, hang).
	exitCode int
	// permanent marks a setup failure that another attempt cannot fix
	// (a configuration error, refused credentials, a host gone for good
	// after host_wait and the spares).
	permanent bool
	// untold marks an error no event has shown yet (setupFailure): the
	// run loop shows it once, as the attempt's failure or in the summary.
	untold bool
	// reattach marks a detached run's attempt that ended because this
	// supervisor lost its processes' channels (a dead link, a machine
	// asleep), not because they ended: the run attaches again.
	reattach bool
	// plan is what a planned restart (kind.Planned) does, for its
	// restarted notification (restart.Restarted).
	plan restart.Plan
}

// policy is what the restart policy needs of out: a setup failure is
// permanent also when the hosts' workdirs are held by another run.
func (out attemptOutcome) policy() restart.Outcome {
	return restart.Outcome{Kind: out.kind, Err: out.err, ExitCode: out.exitCode, Permanent: out.permanent || IsHeld(out.err) || IsGPUsLeased(out.err)}
}

func succeeded() attemptOutcome { return attemptOutcome{kind: outcomeSucceeded, exitCode: -1} }

func interrupted() attemptOutcome { return attemptOutcome{kind: outcomeInterrupted, exitCode: -1} }

// setupFailed is the outcome of an error before the group ran. A
// connection that died on the way is a lost host.
func setupFailed(err error) attemptOutcome {
	if cluster.IsConnectionLost(err) {
		return attemptOutcome{kind: outcomeHostLost, err: err, exitCode: -1}
	}
	return attemptOutcome{kind: outcomeSetupFailed, err: err, exitCode: -1}
}

// processEnv is p's environment with the run's extra variables (tests).
func (a *attempt) processEnv(p plan.Process) map[string]string {
	if len(a.r.opts.Env) == 0 {
		return p.Env
	}
	env := make(map[string]string, len(p.Env)+len(a.r.opts.Env))
	for k, v := range p.Env {
		env[k] = v
	}
	for k, v := range a.r.opts.Env {
		env[k] = v
	}
	return env
}

// processFiles are p's state record and log on its host (absolute).
func (a *attempt) processFiles(c *attemptHost, name string) (state, log string) {
	st, lg := agent.ProcessFiles(a.r.runID, a.n, name)
	wd := remoteAbs(c.home, c.host.Workdir)
	return path.Join(wd, st), path.Join(wd, lg)
}

// waitGPUsReleased waits, after a failed attempt stopped, until NVML shows
// no process of the job on the job's GPUs, so that the next attempt finds
// its memory free; a GPU still held when the wait ends is reported with
// the holding process.
func (a *attempt) waitGPUsReleased(ctx context.Context, conns []*attemptHost, pl *plan.Plan) {
	used := map[string][]int{}
	for _, p := range pl.Processes {
		for _, g := range p.Visible {
			if !slices.Contains(used[p.Host.Name], g) {
				used[p.Host.Name] = append(used[p.Host.Name], g)
			}
		}
	}
	forEach(conns, func(c *attemptHost) error {
		gpus := used[c.host.Name]
		if len(gpus) == 0 {
			return nil
		}
		probe := func(ctx context.Context) gpu.HostReport { return remote.ProbeInstalled(ctx, c.t, c.agent) }
		for _, h := range gpu.WaitReleased(ctx, probe, gpus, a.ph.plan.gpuBefore[c.host.Name], gpuReleaseWait, time.Second) {
			a.r.events.printf("%s: GPU %d on %s is still held by pid %d (%s) %s after the stop; the next attempt may not get its memory",
				a.prefix(), h.GPU, c.host.Name, h.Process.PID, orUnknown(h.Process.Name), gpuReleaseWait)
		}
		return nil
	})
}

// attachOptions attach to p's detached process, from where this
// machine's log of it ends.
func (a *attempt) attachOptions(c *attemptHost, p plan.Process, localLog string) agent.AttachOptions {
	var from int64
	if fi, err := os.Stat(localLog); err == nil {
		from = fi.Size()
	} else if !errors.Is(err, fs.ErrNotExist) {
		a.r.events.printf("%s: %v; streaming %s from its start", a.prefix(), err, p.Name())
	}
	st, _ := a.processFiles(c, p.Name())
	return agent.AttachOptions{State: st, From: from, Heartbeat: heartbeatTimeout,
		SetControllerTimeout: true, ControllerTimeout: a.r.controllerTimeout(a.cfg)}
}

// flightRecorderWait bounds the gathering of the flight recorder's dumps
// after a failed attempt: a host's file access that stalls does not hold
// up the restart.
const flightRecorderWait = 30 * time.Second

// gatherFlightRecorder copies, after a failed attempt, the dumps that
// PyTorch's flight recorder wrote on the hosts (plan.FlightRecorderFiles)
// into the attempt's log directory as flight-recorder/rank-R (package
// nccldiag: bounded, under drover's names), all hosts at once. (A
// function: the attempt's methods are at their limit of files.)
func gatherFlightRecorder(a *attempt, conns []*attemptHost, pl *plan.Plan) {
	byHost := map[string][]nccldiag.Dump{}
	for _, f := range pl.FlightRecorderFiles() {
		byHost[f.Host] = append(byHost[f.Host], nccldiag.Dump{Host: f.Host, Path: f.Path, Name: "rank-" + strconv.Itoa(f.Rank)})
	}
	if len(byHost) == 0 {
		return
	}
	dir := filepath.Join(a.logDir, "flight-recorder")
	var mu sync.Mutex
	var copied int
	done := make(chan struct{})
	go func() {
		defer close(done)
		forEach(conns, func(c *attemptHost) error {
			dumps := byHost[c.host.Name]
			if len(dumps) == 0 || c.fs == nil {
				return nil
			}
			for i := range dumps {
				dumps[i].Files, dumps[i].Path = c.fs, remoteAbs(c.home, dumps[i].Path)
			}
			names, err := nccldiag.Gather(dumps, dir)
			if err != nil {
				a.r.events.printf("%s: warning: PyTorch's flight recorder on %s: %v", a.prefix(), c.host.Name, err)
			}
			mu.Lock()
			copied += len(names)
			mu.Unlock()
			return nil
		})
	}()
	select {
	case <-done:
	case <-time.After(flightRecorderWait):
		a.r.events.printf("%s: warning: gathering PyTorch's flight recorder dumps took over %s; going on without the rest", a.prefix(), flightRecorderWait)
	}
	mu.Lock()
	defer mu.Unlock()
	if copied > 0 {
		a.r.events.printf("%s: PyTorch's flight recorder: the dumps of %d ranks copied into %s", a.prefix(), copied, dir)
	}
}
