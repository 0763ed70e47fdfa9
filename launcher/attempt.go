package launcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/lease"
	"github.com/droverhq/drover/launcher/plan"
)

// attempt is one start of the whole group.
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
}

// hostConn is a connected host, kept in the run's pool (connPool) from
// one attempt to the next: only what outlives an attempt (the transport,
// the file access, the home directory, the installed agent, the last tree
// pushed). What an attempt learns while it prepares the host is its own
// (attemptHost).
type hostConn struct {
	host  config.Host
	t     cluster.Transport
	fs    cluster.FS
	home  string
	agent string // remote path of the drover binary
	// pushed is the Key of the tree the last push over this connection
	// left on the host ("" before one); see pushAndCheck.
	pushed string
}

// attemptHost is a host of one attempt: the pooled connection and what
// this attempt's setup learns of the host on it. Each attempt makes its
// own (newAttemptHosts), so nothing of an attempt is re-armed on a
// connection the next attempt reuses.
type attemptHost struct {
	*hostConn
	// What this attempt's agent install learnt of the host, before its
	// upload: told is closed once it has said (or failed, or had nothing
	// to do). toldHome is the home directory, so that opening the files
	// needs no request of its own for it; newWorkdir says the install
	// created the workdir (it was not there), so the first push has
	// nothing on the host to compare.
	told       chan struct{}
	toldOnce   sync.Once
	toldHome   string
	newWorkdir atomic.Bool
	// installed is closed once installAgents has set agent (or failed):
	// direct checkpoint copies, which start beside the install, wait for
	// it.
	installed     chan struct{}
	installedOnce sync.Once
}

// newAttemptHost is c as a host of a new attempt: nothing told or
// installed yet.
func newAttemptHost(c *hostConn) *attemptHost {
	return &attemptHost{hostConn: c, told: make(chan struct{}), installed: make(chan struct{})}
}

// newAttemptHosts gives each of an attempt's connections the attempt's
// own setup state.
func newAttemptHosts(conns []*hostConn) []*attemptHost {
	out := make([]*attemptHost, len(conns))
	for i, c := range conns {
		out[i] = newAttemptHost(c)
	}
	return out
}

// hostConns are the pooled connections under hosts.
func hostConns(hosts []*attemptHost) []*hostConn {
	out := make([]*hostConn, len(hosts))
	for i, h := range hosts {
		out[i] = h.hostConn
	}
	return out
}

// installDone says the install is over (agent is set, or "").
func (c *attemptHost) installDone() {
	c.installedOnce.Do(func() { close(c.installed) })
}

// tell records what the install learnt (see attemptHost.told); only the
// first call counts.
func (c *attemptHost) tell(home string, newWorkdir bool) {
	c.toldOnce.Do(func() {
		c.toldHome = home
		c.newWorkdir.Store(newWorkdir)
		close(c.told)
	})
}

func (a *attempt) prefix() string { return fmt.Sprintf("attempt %d/%d", a.n, a.total) }

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

func (a *attempt) run(ctx context.Context) attemptOutcome {
	hosts, err := a.r.participants(a.cfg)
	if err != nil {
		return a.setupFailure(err)
	}
	// The connections are the runner's (connPool): they outlive the
	// attempt, and the next one reuses them.
	steps := a.stepTimer()
	sc := a.scan()
	defer func() { <-sc.done }() // nothing of the attempt outlives it
	pooled, err := a.connect(ctx, hosts)
	if err == nil {
		pooled, err = a.netPreflight(ctx, pooled) // a slow host without a spare is final too
	}
	steps("connect")
	if err != nil {
		if ctx.Err() != nil {
			return interrupted()
		}
		// connect already waited host_wait (restarts) or tried the
		// spares: an unreachable host is final here.
		out := a.setupFailure(err)
		out.kind, out.permanent = outcomeSetupFailed, true
		return out
	}
	hosts = hosts[:0]
	for _, c := range pooled {
		hosts = append(hosts, c.host)
	}
	cfg := *a.cfg
	cfg.Hosts = hosts

	// The connections outlive the attempt; what it learns of each host
	// while preparing it is its own.
	conns := newAttemptHosts(pooled)
	installed, err := a.prepare(ctx, conns)
	steps("files and lease")
	if err != nil {
		<-installed
		return a.setupFailure(err) // a *lease.HeldError says the run must not go on
	}
	if a.adopt != nil {
		return a.adoptGroup(ctx, conns, &cfg, installed)
	}
	pl, err := a.pushAndCheck(ctx, conns, sc, &cfg, installed, steps)
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

// prepare starts installing the agents and opens file access and the
// leases beside it; installed says when the install is done. The agent
// needs nothing but the connection, the lease nothing but file access,
// the push nothing but the lease: each starts as soon as what it needs is
// there, beside the others (on a fresh host the agent's upload and the
// first push overlap).
func (a *attempt) prepare(ctx context.Context, conns []*attemptHost) (installed <-chan error, err error) {
	done := make(chan error, 1)
	go func() { done <- a.installAgents(ctx, conns) }()
	err = a.openFiles(ctx, conns)
	if err == nil {
		err = waitTold(ctx, conns)
	}
	if err == nil {
		err = a.holdWorkdirs(ctx, conns)
	}
	return done, err
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

// programsFromPush reports whether a push can change what preflight finds
// of pl's programs: one named by a relative path (./train.sh, bin/run),
// which is looked up in the workdir the push fills, or by an absolute one
// into a workdir, or a PATH in the plan's environment that has a directory
// in a workdir. A program found on the host's own PATH (python3, torchrun)
// is not the push's: its preflight (with the ports, leftovers and the
// route, none of which the code changes) then runs beside the push, which
// on a fresh host is still sending, instead of after it. A host whose own
// PATH leads into the workdir fails that early preflight when the program
// is not there yet, and preflight runs again after the push.
func programsFromPush(pl *plan.Plan, conns []*attemptHost) bool {
	homes := map[string]string{}
	for _, c := range conns {
		homes[c.host.Name] = c.home
	}
	for _, p := range pl.Processes {
		wd := remoteAbs(homes[p.Host.Name], p.Workdir)
		prog := p.Command[0]
		if strings.Contains(prog, "/") && (!path.IsAbs(prog) || within(prog, wd)) {
			return true
		}
		for _, dir := range filepath.SplitList(p.Env["PATH"]) {
			if !path.IsAbs(dir) || within(dir, wd) {
				return true
			}
		}
	}
	return false
}

// within reports whether the absolute path p is dir or under it.
func within(p, dir string) bool {
	rel, ok := strings.CutPrefix(path.Clean(p), path.Clean(dir))
	return ok && (rel == "" || strings.HasPrefix(rel, "/"))
}

// errNotChecked: no preflight ran yet.
var errNotChecked = errors.New("not checked")

// allPushed reports whether every connection's last push sent the tree
// named key.
func allPushed(conns []*attemptHost, key string) bool {
	for _, c := range conns {
		if c.pushed != key {
			return false
		}
	}
	return true
}

// stepTimer returns a function that notes in events.log how long the
// attempt's setup took up to each step it names.
func (a *attempt) stepTimer() func(step string) {
	start := a.r.now()
	return func(step string) {
		a.r.events.debugf("%s: setup: %s done after %s", a.prefix(), step, a.r.now().Sub(start).Round(time.Millisecond))
	}
}

// planAttempt waits for the agents (installed), probes the GPUs and
// builds the plan, without a checkpoint to resume from. in keeps what the
// plan was built from: the checkpoint and preflight's findings
// (interfaces, moved ports) build it again from in (replan).
func (a *attempt) planAttempt(ctx context.Context, conns []*attemptHost, cfg *config.Config, installed <-chan error) (plan.PlanInput, *plan.Plan, error) {
	if err := <-installed; err != nil {
		return plan.PlanInput{}, nil, err
	}
	// The health gate and the GPU probe are a command each per host:
	// side by side, the gate costs no round trip of its own.
	gate := make(chan error, 1)
	go func() { gate <- a.healthGate(ctx, conns) }()
	gpus, err := a.selectGPUs(ctx, conns)
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
	in := plan.PlanInput{Config: cfg, GPUs: gpus, RestartCount: a.restarts, HostHome: homes}
	pl, err := plan.Build(in)
	return in, pl, err
}

// participants are the non-spare hosts in file order, with hosts that were
// replaced earlier swapped for their spare.
func (r *runner) participants(cfg *config.Config) ([]config.Host, error) {
	byName := map[string]config.Host{}
	for _, h := range cfg.Hosts {
		byName[h.Name] = h
	}
	var out []config.Host
	for _, h := range cfg.Hosts {
		if h.Spare {
			continue
		}
		if sp, ok := r.replaced[h.Name]; ok {
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

// isUnreachable tells network failures, which are worth waiting for, from
// permanent ones (a refused host key, failed authentication, a mistake in
// the configuration).
func isUnreachable(err error) bool {
	return cluster.IsUnreachable(err)
}

// connect returns a connection to every host: the one an earlier attempt
// made when it still answers (connPool.reuse), else a new one. An
// unreachable host is retried for host_wait and then replaced by a spare,
// on the first attempt as on a restart (a host rebooting when the run
// starts is as common as one rebooting during it); a refused key or login
// fails at once. Every connection made joins the pool.
func (a *attempt) connect(ctx context.Context, hosts []config.Host) ([]*hostConn, error) {
	opts := a.r.opts.Dial
	opts.Inventory = config.Endpoints(a.cfg.Hosts)
	lost := a.r.takeLost()
	a.r.pool.dropHosts(lost)
	conns := a.r.pool.reuse(ctx, hosts)
	deadline := a.r.now().Add(a.cfg.Job.HostWait) // host_wait counts from the first dial
	errs := a.dialMissing(ctx, hosts, conns, opts, lost)
	for i, h := range hosts {
		err := errs[i]
		if err == nil {
			continue
		}
		if a.n == 1 {
			if name, ok := unresolvable(err); ok {
				// A typo, not a host rebooting: waiting host_wait
				// (5 minutes by default) would not make it resolve.
				return nil, fmt.Errorf("%s: address %q does not resolve (%w); fix the address of host %s in %s",
					h.Name, name, err, h.Name, a.cfg.InventoryPath)
			}
		}
		waited := false
		for isUnreachable(err) && a.r.now().Before(deadline) {
			if !waited {
				a.r.events.printf("%s: %s (%s) unreachable, waiting up to %s for it: %v", a.prefix(), h.Name, h.Address, a.cfg.Job.HostWait, err)
				waited = true
			}
			if serr := a.r.sleep(ctx, min(2*time.Second, deadline.Sub(a.r.now()))); serr != nil {
				return nil, serr
			}
			// Re-read the inventory: the user may be fixing the address
			// while drover waits.
			if cfg, lerr := config.Load(a.r.opts.JobPath, a.r.opts.loadOptions()); lerr == nil {
				for _, nh := range cfg.Hosts {
					if nh.Name == h.Name {
						h = nh
					}
				}
			}
			var t cluster.Transport
			wopts := opts
			wopts.ConnectTimeout = waitDialTimeout(opts.ConnectTimeout, deadline.Sub(a.r.now()))
			t, err = cluster.Dial(ctx, h.Endpoint(), wopts)
			if err == nil {
				conns[i] = &hostConn{host: h, t: t}
				a.r.pool.add(conns[i])
				a.r.events.printf("%s: %s (%s) is back", a.prefix(), h.Name, h.Address)
			}
		}
		if err == nil {
			continue
		}
		if !isUnreachable(err) {
			return nil, err
		}
		spare, t, serr := a.takeSpare(ctx, hosts, opts)
		if serr != nil {
			return nil, fmt.Errorf("%w; %v", err, serr)
		}
		a.r.events.printf("%s: %s (%s) unreachable: %v; replaced by spare %s (%s)", a.prefix(), h.Name, h.Address, err, spare.Name, spare.Address)
		a.r.replaced[h.Name] = spare.Name
		// It stands in for h now: the plan gives it h's ranks (a host
		// still marked spare would get none and the world would shrink).
		spare.Spare = false
		conns[i] = &hostConn{host: spare, t: t}
		a.r.pool.add(conns[i])
	}
	inUse := make([]config.Host, len(conns))
	for i, c := range conns {
		inUse[i] = c.host
	}
	a.r.pool.keepOnly(inUse)
	return conns, nil
}

// dialMissing dials, all at once, the hosts that have no connection in
// conns yet (hosts in lost with a dial bounded by host_wait: dialFirst),
// adds the new ones to conns and the pool, and returns each host's dial
// error.
func (a *attempt) dialMissing(ctx context.Context, hosts []config.Host, conns []*hostConn, opts cluster.DialOptions, lost map[string]bool) []error {
	var fresh []config.Host
	var at []int
	for i, c := range conns {
		if c == nil {
			fresh = append(fresh, hosts[i])
			at = append(at, i)
		}
	}
	errs := make([]error, len(hosts))
	ts, ferrs := a.dialFirst(ctx, fresh, opts, lost)
	for k, i := range at {
		if errs[i] = ferrs[k]; errs[i] == nil {
			conns[i] = &hostConn{host: hosts[i], t: ts[k]}
			a.r.pool.add(conns[i])
		}
	}
	return errs
}

// waitDialTimeout bounds a dial made while waiting for an unreachable host
// by what is left of host_wait (at least a second), so that a short
// host_wait is not stretched by a full connect timeout to a host that is
// gone: a spare takes over when the user said it should.
func waitDialTimeout(timeout, left time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = cluster.DefaultConnectTimeout
	}
	return max(min(timeout, left), time.Second)
}

// takeSpare dials the first spare host not already in use.
func (a *attempt) takeSpare(ctx context.Context, inUse []config.Host, opts cluster.DialOptions) (config.Host, cluster.Transport, error) {
	used := map[string]bool{}
	for _, h := range inUse {
		used[h.Name] = true
	}
	for _, v := range a.r.replaced {
		used[v] = true
	}
	var lastErr error
	for _, h := range a.cfg.Hosts {
		if !h.Spare || used[h.Name] {
			continue
		}
		t, err := cluster.Dial(ctx, h.Endpoint(), opts)
		if err != nil {
			lastErr = err
			continue
		}
		return h, t, nil
	}
	if lastErr != nil {
		return config.Host{}, nil, fmt.Errorf("no spare host reachable either (last: %v)", lastErr)
	}
	return config.Host{}, nil, errors.New(`no spare host left: add one with spare = true to the inventory, or bring the host back`)
}

// forEach runs fn for every host at once and joins the errors.
func forEach[C any](conns []C, fn func(c C) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func hostLabel(h config.Host) string {
	if h.Transport == config.TransportLocal {
		return h.Name + " (local)"
	}
	return fmt.Sprintf("%s (%s)", h.Name, h.Address)
}

// openFiles opens file access and learns the home directory on every
// connection that does not have them yet.
func (a *attempt) openFiles(ctx context.Context, conns []*attemptHost) error {
	return forEach(conns, func(c *attemptHost) error {
		if c.fs != nil {
			return nil
		}
		fsys, err := c.t.FS(ctx)
		if err != nil {
			return fmt.Errorf("open files on %s: %w", hostLabel(c.host), err)
		}
		home, err := a.home(ctx, c, fsys)
		if err != nil {
			return fmt.Errorf("home directory on %s: %w", hostLabel(c.host), err)
		}
		c.fs, c.home = fsys, home
		return nil
	})
}

// home is c's home directory: what the agent's install said of it, or
// what fsys says, whichever comes first. The install's command says it
// about when SFTP has opened, a round trip before an SFTP request for it
// would answer; on Slurm, where a step takes a while to start, SFTP's
// answer may come first.
func (a *attempt) home(ctx context.Context, c *attemptHost, fsys cluster.FS) (string, error) {
	type answer struct {
		home string
		err  error
	}
	asked := make(chan answer, 1)
	go func() {
		h, err := fsys.Home()
		asked <- answer{h, err}
	}()
	select {
	case <-c.told:
		if c.toldHome != "" {
			return c.toldHome, nil
		}
	case r := <-asked:
		return r.home, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
	r := <-asked
	return r.home, r.err
}

// waitTold waits until every install has said whether it made the
// workdir (see attemptHost.told), before the lease: the lease would make a
// missing workdir itself, and the install would then find it there and
// the first push list what is a new workdir. The install's answer comes
// about when SFTP opens, so this seldom waits.
func waitTold(ctx context.Context, conns []*attemptHost) error {
	for _, c := range conns {
		select {
		case <-c.told:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// installAgents installs the agent on every connection that an earlier
// attempt did not install it over (a kept connection's agent was checked
// when it was installed; after a setup failure the next attempt starts on
// new connections, see forgetPrepared). It sets hostConn.agent and nothing
// else (on the host it also creates the workdir's state directory, which
// the lease would create otherwise), so it runs beside the other setup
// steps.
func (a *attempt) installAgents(ctx context.Context, conns []*attemptHost) error {
	return forEach(conns, func(c *attemptHost) error {
		defer c.tell("", false) // nothing learnt, or failed
		defer c.installDone()
		if c.agent != "" {
			return nil
		}
		// The lease, taken beside the install, then finds the
		// workdir's state directory there (see lease.File).
		wd := c.host.Workdir
		in, err := remote.InstallWith(ctx, c.t, a.r.agents(), remote.InstallOptions{
			Dirs: []string{wd, path.Join(wd, path.Dir(lease.File))},
			Told: func(home string, made []string) { c.tell(home, slices.Contains(made, wd)) },
		})
		c.agent = in.Path
		return err // "install drover agent on <host> (<address>): ..."
	})
}

// selectGPUs probes hosts with gpus = "auto" and applies the selection
// rules; GPU-less hosts need no probe. Hosts with pinned GPUs are probed
// too, only to learn which processes were on their GPUs before the attempt
// (see waitGPUsReleased).
func (a *attempt) selectGPUs(ctx context.Context, conns []*attemptHost) (map[string]plan.HostGPUs, error) {
	var mu sync.Mutex
	out := map[string]plan.HostGPUs{}
	a.gpuBefore = map[string]map[int][]int{}
	err := forEach(conns, func(c *attemptHost) error {
		hg := plan.HostGPUs{Indices: c.host.GPUs.List, Probed: true}
		var before map[int][]int
		if c.host.GPUs.Auto || len(c.host.GPUs.List) > 0 {
			rep := remote.ProbeInstalled(ctx, c.t, c.agent)
			before = gpu.Pids(rep)
			if c.host.GPUs.Auto {
				sel, err := gpu.Select(c.host.Name, gpuPolicy(c.host, a.cfg.Job), rep)
				if err != nil {
					return fmt.Errorf("select GPUs on %s: %w", hostLabel(c.host), err)
				}
				hg.Indices = sel.Indices
				if len(sel.Indices) == 0 && rep.Reason != "" {
					a.r.events.printf("%s: %s has no usable GPU (%s); planning it as a CPU host", a.prefix(), c.host.Name, rep.Reason)
				}
			}
		}
		mu.Lock()
		out[c.host.Name] = hg
		a.gpuBefore[c.host.Name] = before
		mu.Unlock()
		return nil
	})
	return out, err
}

// gpuReleaseWait bounds the wait for a stopped attempt's GPUs to be free.
const gpuReleaseWait = 30 * time.Second

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
		for _, h := range gpu.WaitReleased(ctx, probe, gpus, a.gpuBefore[c.host.Name], gpuReleaseWait, time.Second) {
			a.r.events.printf("%s: GPU %d on %s is still held by pid %d (%s) %s after the stop; the next attempt may not get its memory",
				a.prefix(), h.GPU, c.host.Name, h.Process.PID, orUnknown(h.Process.Name), gpuReleaseWait)
		}
		return nil
	})
}

func orUnknown(s string) string {
	if s == "" {
		return "name unknown"
	}
	return s
}

func remoteAbs(home, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(home, p)
}

// scanned is the local side of an attempt's push: the code directory's
// tree and the options it was scanned with, once scan's goroutine is done.
type scanned struct {
	done chan struct{}
	tree *push.Tree
	opts push.Options
	err  error
}

// scan scans the code directory in the background: it is local work that
// needs no host, so it runs while the hosts are connected and prepared.
func (a *attempt) scan() *scanned {
	// The same rule as `drover push` (pushOptions). What is about to run
	// is checked (sizes and mtimes): a file edited or deleted on a host
	// since the last push is put back.
	sc := &scanned{done: make(chan struct{}), opts: pushOptions(a.cfg, a.r.logRoot, a.r.opts.PushCacheDir, push.VerifyStat)}
	opts := sc.opts // the scan's own copy
	go func() {
		defer close(sc.done)
		start := a.r.now()
		sc.tree, sc.err = scanLocal(a.cfg.Job.Code, opts)
		a.r.events.debugf("%s: setup: scan of %s took %s", a.prefix(), a.cfg.Job.Code, a.r.now().Sub(start).Round(time.Millisecond))
	}()
	return sc
}

// pushOutcome is how an attempt's push went: changed says it sent or
// deleted anything on any host.
type pushOutcome struct {
	changed bool
	err     error
}

// push syncs the code directory, as sc scanned it, to every host's
// workdir (incremental).
func (a *attempt) push(ctx context.Context, conns []*attemptHost, sc *scanned) pushOutcome {
	<-sc.done
	tree, opts, err := sc.tree, sc.opts, sc.err
	if err != nil {
		return pushOutcome{err: fmt.Errorf("scan code directory %s: %w", a.cfg.Job.Code, err)}
	}
	for _, w := range tree.Warnings {
		a.r.events.printf("%s: push: warning: %s", a.prefix(), w)
	}
	var changed atomic.Bool
	err = forEach(a.pushTargets(conns), func(c *attemptHost) error {
		o := opts
		o.NewWorkdir = c.newWorkdir.Load()
		res, err := push.Sync(ctx, c.fs, hostLabel(c.host), tree, c.host.Workdir, o)
		// As `drover push` shows them: what did not stop the push but
		// the user should hear of (the tar fallback, a link left alone
		// on the host).
		for _, w := range res.Warnings {
			a.r.events.printf("%s: push to %s: warning: %s", a.prefix(), c.host.Name, w)
		}
		if err != nil {
			return err
		}
		fresh := ""
		if o.NewWorkdir {
			fresh = " (into a workdir the install made: nothing to compare)"
		}
		a.r.events.debugf("%s: setup: push to %s took %s%s", a.prefix(), c.host.Name, res.Duration.Round(time.Millisecond), fresh)
		if res.FilesSent > 0 || res.FilesDeleted > 0 {
			changed.Store(true)
			a.r.events.printf("%s: pushed %d file(s) (%d bytes), deleted %d on %s", a.prefix(), res.FilesSent, res.BytesSent, res.FilesDeleted, c.host.Name)
		}
		return nil
	})
	return pushOutcome{changed: changed.Load(), err: err}
}

const pidDir = ".drover/pids"

// Drover pings every agent this often; an agent that hears nothing for
// heartbeatTimeout stops its group (drover died or the link is down).
const (
	heartbeatEvery   = time.Second
	heartbeatTimeout = 6 * time.Second
)

// preflightFound is what preflight learnt of the hosts, by host name: the
// network interface toward the rendezvous address (PlanInput.Ifaces), and
// the first of the free ports that replace held ones.
type preflightFound struct {
	ifaces map[string]string
	moved  map[string]int
}

// preflight stops, per host and before anything starts, the process
// groups an earlier drover left behind on it (drover SIGKILLed with the
// agent's channel somehow kept open, or a host that was unreachable when
// its group should have stopped), finds the host's interface toward the
// plan's rendezvous address, then checks that each program can be found
// and each planned port is free: one agent command per host, one
// exchange. On a restart a port still held (by the previous attempt's
// rendezvous, say) does not fail it: the host's agent finds as many
// consecutive free ports.
func (a *attempt) preflight(ctx context.Context, conns []*attemptHost, pl *plan.Plan) (preflightFound, error) {
	byHost := map[string][]plan.Process{}
	for _, p := range pl.Processes {
		byHost[p.Host.Name] = append(byHost[p.Host.Name], p)
	}
	var mu sync.Mutex
	found := preflightFound{ifaces: map[string]string{}, moved: map[string]int{}}
	err := forEach(conns, func(c *attemptHost) error {
		wd := remoteAbs(c.home, c.host.Workdir)
		o := agent.PreflightOptions{Leftovers: path.Join(wd, pidDir), Grace: a.cfg.Job.StopGrace,
			RouteTo: pl.RendezvousAddr(), Lease: path.Join(wd, lease.File), LeaseID: a.r.leases.ID()}
		cmd := cluster.Cmd{}
		procs := byHost[c.host.Name]
		if len(procs) > 0 {
			o.Program, o.Ports = procs[0].Command[0], plannedPorts(pl, procs)
			o.MovePorts = a.n > 1 && len(o.Ports) > 0
			cmd.Env, cmd.Dir = preflightEnv(procs[0].Env), procs[0].Workdir
		}
		// Both streams into one buffer, from two goroutines: a locked one.
		out := cluster.NewTailBuffer(preflightOutput)
		cmd.Args, cmd.Stdout, cmd.Stderr = agent.PreflightCommand(c.agent, o), out, out
		err := runToEnd(ctx, c.t, cmd)
		var rest []string
		for _, line := range strings.Split(out.String(), "\n") {
			if holds, ok := strings.CutPrefix(line, agent.LeaseTakenPrefix); ok {
				return &leaseMovedError{host: c.host.Name, dir: wd, by: lease.Decode(holds)}
			}
			if msg, ok := strings.CutPrefix(line, agent.LeftoverPrefix); ok {
				a.r.events.printf("%s: %s: %s", a.prefix(), c.host.Name, msg)
				continue
			}
			if v, ok := strings.CutPrefix(line, agent.IfacePrefix); ok {
				if ifc := ifaceName(v); ifc != "" {
					mu.Lock()
					found.ifaces[c.host.Name] = ifc
					mu.Unlock()
				}
				continue
			}
			v, ok := strings.CutPrefix(line, agent.FreePortsPrefix)
			if !ok || err != nil {
				rest = append(rest, line)
				continue
			}
			base, perr := strconv.Atoi(strings.TrimSpace(v))
			if perr != nil || base <= 0 {
				return fmt.Errorf("preflight on %s: bad answer %q", hostLabel(c.host), line)
			}
			mu.Lock()
			found.moved[c.host.Name] = base
			mu.Unlock()
			a.r.events.printf("%s: port(s) %s held on %s; this attempt uses %s", a.prefix(),
				strings.Join(o.Ports, ", "), c.host.Name, portRange(base, len(o.Ports)))
		}
		var ee *cluster.ExitError
		if err != nil && !errors.As(err, &ee) {
			return fmt.Errorf("preflight on %s: %w", hostLabel(c.host), err) // the connection, not the check
		}
		if err != nil {
			// The agent prints its failure as "drover: ..." (its CLI's
			// prefix); drover's own message names the host instead.
			msg := strings.TrimSpace(strings.ReplaceAll("\n"+strings.Join(rest, "\n"), "\ndrover: ", "\n"))
			if msg == "" {
				msg = err.Error()
			}
			return fmt.Errorf("preflight on %s: %s", hostLabel(c.host), msg)
		}
		return nil
	})
	return found, err
}

// leaseMovedError is a host's agent refusing to stop leftovers because
// the workdir's lease was not this run's when it looked (checked on the
// host just before it would have stopped anything).
type leaseMovedError struct {
	host, dir string
	by        lease.Owner
}

func (e *leaseMovedError) Error() string {
	return fmt.Sprintf("%s: the workdir lease of %s is held by %s: not stopping anything there", e.host, e.dir, e.by)
}

// preflightOwned is preflight, which stops leftovers only under this
// run's lease, settled with the leases when an agent found one that is
// not: the run checks them (lease.Holder.Check), which ends it with a
// *lease.LostError when another run took one over, or takes it back when
// that run may not hold it (an older run's late renewal over a --force
// takeover), and then tries again.
func (a *attempt) preflightOwned(ctx context.Context, conns []*attemptHost, pl *plan.Plan) (preflightFound, error) {
	for try := 0; ; try++ {
		found, err := a.preflight(ctx, conns, pl)
		var moved *leaseMovedError
		if !errors.As(err, &moved) || try == 3 {
			return found, err
		}
		if err := a.r.leases.Check(ctx); err != nil {
			return found, err
		}
	}
}

// preflightOutput bounds what preflight keeps of a host's answer.
const preflightOutput = 64 << 10

// stopWait bounds the wait for a command stopped because ctx ended (see
// runToEnd) to report its exit.
const stopWait = 5 * time.Second

// runToEnd runs cmd on t's host and waits for it. When ctx ends first the
// command is stopped (SIGTERM to its group) rather than left running on
// the host, as closing its channel would: a preflight stopping leftovers
// for a run that has just lost its workdir must not go on doing so.
func runToEnd(ctx context.Context, t cluster.Transport, cmd cluster.Cmd) error {
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

// plannedPorts are the ports procs (one host's processes) listen on: TF
// task ports, and the rendezvous port on rank 0's host.
func plannedPorts(pl *plan.Plan, procs []plan.Process) []string {
	var ports []string
	for _, p := range procs {
		if p.Port > 0 {
			ports = append(ports, fmt.Sprint(p.Port))
		}
	}
	if mp := procs[0].Env["MASTER_PORT"]; mp != "" && procs[0].Host.Name == pl.Processes[0].Host.Name {
		ports = append(ports, mp)
	}
	if jc := procs[0].Env["JAX_COORDINATOR_ADDRESS"]; jc != "" && procs[0].Host.Name == pl.Processes[0].Host.Name {
		if _, port, err := net.SplitHostPort(jc); err == nil {
			ports = append(ports, port)
		}
	}
	sort.Strings(ports)
	return compactStrings(ports)
}

func portRange(base, n int) string {
	if n == 1 {
		return strconv.Itoa(base)
	}
	return fmt.Sprintf("%d-%d", base, base+n-1)
}

// replan builds the plan again from in (which has the checkpoint now)
// with what preflight found: each host's interface, and free ports in
// place of held ones.
func (a *attempt) replan(in plan.PlanInput, pl *plan.Plan, found preflightFound) (*plan.Plan, error) {
	in.Ifaces = found.ifaces
	in.BasePorts = map[string]int{}
	for _, p := range pl.Processes {
		base, ok := found.moved[p.Host.Name]
		if !ok {
			continue
		}
		if a.cfg.Job.Framework == config.TensorFlow {
			in.BasePorts[p.Address] = base
		} else {
			in.MasterPort = base
		}
	}
	return plan.Build(in)
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// unresolvable reports a dial that failed because the host's name does
// not exist in DNS (NXDOMAIN; not a resolver that timed out or is
// unreachable, which may pass), and the name.
func unresolvable(err error) (string, bool) {
	var de *net.DNSError
	if errors.As(err, &de) && de.IsNotFound {
		return de.Name, true
	}
	return "", false
}

// preflightEnv is what of a process's environment its host's preflight
// gets: PATH alone, the one variable finding the program depends on. The
// preflight's environment travels on the login shell's command line,
// which other users of the host can read while the shell starts; the
// rest ([job.env] tokens among it) reaches only the processes, over their
// agents' stdin (agent.EnvLine).
func preflightEnv(env map[string]string) map[string]string {
	if p, ok := env["PATH"]; ok {
		return map[string]string{"PATH": p}
	}
	return nil
}
