package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
	"github.com/droverhq/drover/gpu"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/logstream"
	"github.com/droverhq/drover/launcher/plan"
)

// attemptOutcome is how one attempt of the whole group ended.
type attemptOutcome struct {
	success     bool
	interrupted bool
	// err is a setup failure (connect, probe, push, preflight).
	err         error
	setupFailed bool
	hostLost    bool
	// exitCode of the first failing process (-1 when it did not exit).
	exitCode int
	reason   string
}

// attempt_ is one start of the whole group.
type attempt_ struct {
	r        *runner
	cfg      *config.Config
	n, total int
	restarts int
	logDir   string
}

// hostConn is a connected, prepared host of this attempt.
type hostConn struct {
	host  config.Host
	t     cluster.Transport
	fs    cluster.FS
	home  string
	agent string // remote path of the drover binary
}

func (a *attempt_) prefix() string { return fmt.Sprintf("attempt %d/%d", a.n, a.total) }

// setupFailure ends an attempt that could not start the group. Only a
// connection that died on the way counts as a lost host (worth a restart);
// a missing program, a taken port or a failed push would fail the same way
// again.
func (a *attempt_) setupFailure(err error) attemptOutcome {
	a.r.events.printf("%s: %v", a.prefix(), err)
	return attemptOutcome{err: err, setupFailed: true, exitCode: -1, hostLost: cluster.IsConnectionLost(err)}
}

func (a *attempt_) run(ctx context.Context) attemptOutcome {
	hosts, err := a.r.participants(a.cfg)
	if err != nil {
		return a.setupFailure(err)
	}
	conns, err := a.connect(ctx, hosts)
	defer func() {
		for _, c := range conns {
			c.t.Close()
		}
	}()
	if err != nil {
		if ctx.Err() != nil {
			return attemptOutcome{interrupted: true}
		}
		// connect already waited host_wait (restarts) or tried the
		// spares: an unreachable host is final here.
		out := a.setupFailure(err)
		out.hostLost = false
		return out
	}
	if err := a.holdWorkdirs(ctx, conns); err != nil {
		return a.setupFailure(err)
	}
	hosts = hosts[:0]
	for _, c := range conns {
		hosts = append(hosts, c.host)
	}
	cfg := *a.cfg
	cfg.Hosts = hosts

	if err := a.prepareHosts(ctx, conns); err != nil {
		return a.setupFailure(err)
	}
	gpus, err := a.selectGPUs(ctx, conns)
	if err != nil {
		return a.setupFailure(err)
	}
	homes := map[string]string{}
	for _, c := range conns {
		homes[c.host.Name] = c.home
	}

	resume, err := a.stageCheckpoint(ctx, conns)
	if err != nil {
		return a.setupFailure(err)
	}
	in := plan.PlanInput{Config: &cfg, GPUs: gpus, RestartCount: a.restarts, HostResumeFrom: resume, HostHome: homes}
	pl, err := plan.Build(in)
	if err == nil {
		pl, err = a.withIfaces(ctx, conns, in, pl)
	}
	if err != nil {
		return a.setupFailure(err)
	}
	if err := a.push(ctx, conns); err != nil {
		return a.setupFailure(err)
	}
	if err := a.stopLeftovers(ctx, conns, pl); err != nil {
		return a.setupFailure(err)
	}
	if err := a.preflight(ctx, conns, pl); err != nil {
		return a.setupFailure(err)
	}
	if ctx.Err() != nil {
		return attemptOutcome{interrupted: true}
	}
	defer a.watchCheckpoints(ctx, conns)()
	return a.supervise(ctx, conns, pl)
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

// connect dials every host. On a restart, an unreachable host is retried
// for host_wait and then replaced by a spare; on the first attempt it is
// replaced at once (or the run fails) so a typo does not cost minutes.
func (a *attempt_) connect(ctx context.Context, hosts []config.Host) ([]*hostConn, error) {
	opts := a.r.opts.Dial
	opts.Inventory = a.cfg.Hosts
	ts, errs := cluster.DialAll(ctx, hosts, opts)
	conns := make([]*hostConn, len(hosts))
	for i := range hosts {
		if errs[i] == nil {
			conns[i] = &hostConn{host: hosts[i], t: ts[i]}
		}
	}
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				c.t.Close()
			}
		}
	}
	deadline := a.r.now().Add(a.cfg.Job.HostWait)
	for i, h := range hosts {
		err := errs[i]
		if err == nil {
			continue
		}
		waited := false
		for a.n > 1 && isUnreachable(err) && a.r.now().Before(deadline) {
			if !waited {
				a.r.events.printf("%s: %s (%s) unreachable, waiting up to %s for it: %v", a.prefix(), h.Name, h.Address, a.cfg.Job.HostWait, err)
				waited = true
			}
			if serr := a.r.sleep(ctx, 2*time.Second); serr != nil {
				closeAll()
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
			t, err = cluster.Dial(ctx, h, opts)
			if err == nil {
				conns[i] = &hostConn{host: h, t: t}
				a.r.events.printf("%s: %s (%s) is back", a.prefix(), h.Name, h.Address)
			}
		}
		if err == nil {
			continue
		}
		if !isUnreachable(err) {
			closeAll()
			return nil, err
		}
		spare, t, serr := a.takeSpare(ctx, hosts, opts)
		if serr != nil {
			closeAll()
			return nil, fmt.Errorf("%w; %v", err, serr)
		}
		a.r.events.printf("%s: %s (%s) unreachable: %v; replaced by spare %s (%s)", a.prefix(), h.Name, h.Address, err, spare.Name, spare.Address)
		a.r.replaced[h.Name] = spare.Name
		// It stands in for h now: the plan gives it h's ranks (a host
		// still marked spare would get none and the world would shrink).
		spare.Spare = false
		conns[i] = &hostConn{host: spare, t: t}
	}
	return conns, nil
}

// takeSpare dials the first spare host not already in use.
func (a *attempt_) takeSpare(ctx context.Context, inUse []config.Host, opts cluster.DialOptions) (config.Host, cluster.Transport, error) {
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
		t, err := cluster.Dial(ctx, h, opts)
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
func forEach(conns []*hostConn, fn func(c *hostConn) error) error {
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

// prepareHosts opens file access, learns each home directory and installs
// the agent.
func (a *attempt_) prepareHosts(ctx context.Context, conns []*hostConn) error {
	return forEach(conns, func(c *hostConn) error {
		fsys, err := c.t.FS(ctx)
		if err != nil {
			return fmt.Errorf("open files on %s: %w", hostLabel(c.host), err)
		}
		c.fs = fsys
		if c.home, err = fsys.Home(); err != nil {
			return fmt.Errorf("home directory on %s: %w", hostLabel(c.host), err)
		}
		if c.agent, err = remote.Install(ctx, c.t, a.r.agents); err != nil {
			return err // "install drover agent on <host> (<address>): ..."
		}
		return nil
	})
}

// selectGPUs probes hosts with gpus = "auto" and applies the selection
// rules; pinned and GPU-less hosts need no probe.
func (a *attempt_) selectGPUs(ctx context.Context, conns []*hostConn) (map[string]plan.HostGPUs, error) {
	var mu sync.Mutex
	out := map[string]plan.HostGPUs{}
	err := forEach(conns, func(c *hostConn) error {
		hg := plan.HostGPUs{Indices: c.host.GPUs.List, Probed: true}
		if c.host.GPUs.Auto {
			rep := remote.ProbeInstalled(ctx, c.t, c.agent)
			sel, err := gpu.Select(c.host, a.cfg.Job, rep)
			if err != nil {
				return fmt.Errorf("select GPUs on %s: %w", hostLabel(c.host), err)
			}
			hg.Indices = sel.Indices
			if len(sel.Indices) == 0 && rep.Reason != "" {
				a.r.events.printf("%s: %s has no usable GPU (%s); planning it as a CPU host", a.prefix(), c.host.Name, rep.Reason)
			}
		}
		mu.Lock()
		out[c.host.Name] = hg
		mu.Unlock()
		return nil
	})
	return out, err
}

func remoteAbs(home, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(home, p)
}

// push syncs the code directory to every host's workdir (incremental).
func (a *attempt_) push(ctx context.Context, conns []*hostConn) error {
	// The same rule as `drover push`: excludes, and checkpoints and logs
	// inside the code directory never pushed, overwritten or deleted.
	opts := push.ForJob(a.cfg, a.r.logRoot)
	opts.CacheDir = a.r.opts.PushCacheDir
	// What is about to run is checked (sizes and mtimes): a file edited
	// or deleted on a host since the last push is put back.
	opts.Verify = push.VerifyStat
	tree, err := push.ScanLocal(a.cfg.Job.Code, opts)
	if err != nil {
		return fmt.Errorf("scan code directory %s: %w", a.cfg.Job.Code, err)
	}
	for _, w := range tree.Warnings {
		a.r.events.printf("%s: push: warning: %s", a.prefix(), w)
	}
	return forEach(a.pushTargets(conns), func(c *hostConn) error {
		res, err := push.Sync(ctx, c.fs, hostLabel(c.host), tree, c.host.Workdir, opts)
		if err != nil {
			return err
		}
		if res.FilesSent > 0 || res.FilesDeleted > 0 {
			a.r.events.printf("%s: pushed %d file(s) (%d bytes), deleted %d on %s", a.prefix(), res.FilesSent, res.BytesSent, res.FilesDeleted, c.host.Name)
		}
		return nil
	})
}

const pidDir = ".drover/pids"

// Drover pings every agent this often; an agent that hears nothing for
// heartbeatTimeout stops its group (drover died or the link is down).
const (
	heartbeatEvery   = time.Second
	heartbeatTimeout = 6 * time.Second
)

// stopLeftovers stops process groups that an earlier drover left behind
// on a host (drover SIGKILLed with the agent's channel somehow kept open,
// or a host that was unreachable when its group should have stopped).
func (a *attempt_) stopLeftovers(ctx context.Context, conns []*hostConn, pl *plan.Plan) error {
	return forEach(conns, func(c *hostConn) error {
		wd := c.host.Workdir
		dir := path.Join(remoteAbs(c.home, wd), pidDir)
		entries, err := c.fs.ReadDir(dir)
		if err != nil {
			return nil // no pid directory: nothing ran here
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".pid") {
				continue
			}
			var out strings.Builder
			args := agent.StopCommand(c.agent, path.Join(dir, e.Name()), a.cfg.Job.StopGrace)
			p, err := c.t.Start(ctx, cluster.Cmd{Args: args, Stdout: &out, Stderr: &out})
			if err == nil {
				err = p.Wait()
			}
			if msg := strings.TrimSpace(out.String()); msg != "" {
				a.r.events.printf("%s: %s: %s", a.prefix(), c.host.Name, msg)
			}
			if err != nil {
				return fmt.Errorf("stop leftover processes on %s: %w", hostLabel(c.host), err)
			}
		}
		return nil
	})
}

// preflight checks, per host and before anything starts, that each
// program can be found and each planned port is free.
func (a *attempt_) preflight(ctx context.Context, conns []*hostConn, pl *plan.Plan) error {
	byHost := map[string][]plan.Process{}
	for _, p := range pl.Processes {
		byHost[p.Host.Name] = append(byHost[p.Host.Name], p)
	}
	return forEach(conns, func(c *hostConn) error {
		procs := byHost[c.host.Name]
		if len(procs) == 0 {
			return nil
		}
		var ports []string
		for _, p := range procs {
			if p.Port > 0 {
				ports = append(ports, fmt.Sprint(p.Port))
			}
		}
		// The rendezvous port is opened on the host of rank 0 only.
		if mp := procs[0].Env["MASTER_PORT"]; mp != "" && c.host.Name == pl.Processes[0].Host.Name {
			ports = append(ports, mp)
		}
		sort.Strings(ports)
		ports = compactStrings(ports)
		p := procs[0]
		var out strings.Builder
		args := agent.PreflightCommand(c.agent, p.Command[0], ports)
		proc, err := c.t.Start(ctx, cluster.Cmd{Args: args, Env: p.Env, Dir: p.Workdir, Stdout: &out, Stderr: &out})
		if err == nil {
			err = proc.Wait()
		}
		if err != nil {
			// The agent prints its failure as "drover: ..." (its CLI's
			// prefix); drover's own message names the host instead.
			msg := strings.TrimSpace(strings.ReplaceAll("\n"+out.String(), "\ndrover: ", "\n"))
			if msg == "" {
				msg = err.Error()
			}
			return fmt.Errorf("preflight on %s: %s", hostLabel(c.host), msg)
		}
		return nil
	})
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

// running is one started process of the attempt.
type running struct {
	p       plan.Process
	ctl     *control
	started time.Time
	outs    []io.Closer
	logFile io.WriteCloser
	// stderrTail is the end of its stderr, for a root cause when it
	// fails without an error file.
	stderrTail *cluster.TailBuffer
}

type exitMsg struct {
	i   int
	err error
	at  time.Time
}

// describeExit renders a process's end for events and the summary.
func describeExit(err error) (text string, code int, lost bool) {
	if err == nil {
		return "0", 0, false
	}
	var ee *cluster.ExitError
	if errors.As(err, &ee) {
		sig := ee.Signal
		if sig == "" && ee.Code > 128 && ee.Code < 128+65 {
			// The agent reports a signal death as 128+n, as a shell does.
			sig = strings.TrimPrefix(unix.SignalName(syscall.Signal(ee.Code-128)), "SIG")
		}
		if sig != "" {
			return fmt.Sprintf("%d (SIG%s)", ee.Code, sig), ee.Code, false
		}
		return fmt.Sprint(ee.Code), ee.Code, false
	}
	if errors.Is(err, cluster.ErrConnectionLost) {
		return "host lost", -1, true
	}
	return "error: " + err.Error(), -1, true
}

// supervise starts every process and watches the group until it succeeds,
// one process fails, or the user interrupts.
func (a *attempt_) supervise(ctx context.Context, conns []*hostConn, pl *plan.Plan) attemptOutcome {
	a.r.makeLogDir(a.logDir)
	byHost := map[string]*hostConn{}
	for _, c := range conns {
		byHost[c.host.Name] = c
	}
	// Sessions live until every process has exited; cancelling closes the
	// channels, which the agents take as "drover is gone".
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	for _, p := range pl.Processes {
		a.r.register(p)
	}
	term := logstream.NewSink(a.r.opts.Out)
	procs := make([]*running, len(pl.Processes))
	exits := make(chan exitMsg, len(procs))
	started := 0
	var startErr error
	for i, p := range pl.Processes {
		c := byHost[p.Host.Name]
		rp := &running{p: p, ctl: newControl(), started: a.r.now()}
		procs[i] = rp
		f := a.r.createLog(filepath.Join(a.logDir, p.Name()+".log"))
		rp.logFile = f
		fileSink := logstream.NewSink(f)
		mk := func() io.Writer {
			fw := logstream.NewPrefixWriter(fileSink, "")
			rp.outs = append(rp.outs, fw)
			if a.r.opts.Quiet {
				return fw
			}
			tw := logstream.NewPrefixWriter(term, fmt.Sprintf("[%s@%s] ", p.Name(), p.Host.Name))
			rp.outs = append(rp.outs, tw)
			return io.MultiWriter(fw, tw)
		}
		rp.stderrTail = cluster.NewTailBuffer(stderrTailBytes)
		stdout, stderr := mk(), io.MultiWriter(mk(), rp.stderrTail)
		wd := p.Workdir
		args := agent.Command(c.agent, agent.RunOptions{
			Grace:   a.cfg.Job.StopGrace,
			PIDFile: path.Join(remoteAbs(c.home, wd), pidDir, p.Name()+".pid"),
			LogFile: path.Join(remoteAbs(c.home, wd), ".drover/logs", fmt.Sprintf("attempt-%d", a.n), p.Name()+".log"),
			Job:     a.cfg.Job.Name,
			Args:    p.Command,
			// The agent stops its group when drover falls silent: the
			// only way it learns of a controller behind a dead link.
			Heartbeat: heartbeatTimeout,
		})
		env := p.Env
		if len(a.r.opts.Env) > 0 {
			env = make(map[string]string, len(p.Env)+len(a.r.opts.Env))
			for k, v := range p.Env {
				env[k] = v
			}
			for k, v := range a.r.opts.Env {
				env[k] = v
			}
		}
		proc, err := c.t.Start(sctx, cluster.Cmd{Args: args, Env: env, Dir: wd, Stdin: rp.ctl, Stdout: stdout, Stderr: stderr})
		if err != nil {
			startErr = fmt.Errorf("start %s on %s: %w", p.Name(), hostLabel(p.Host), err)
			break
		}
		started++
		go func() {
			err := proc.Wait()
			exits <- exitMsg{i: i, err: err, at: a.r.now()}
		}()
	}
	a.r.events.printf("%s: started %d process(es) on %d host(s)", a.prefix(), started, len(conns))

	out := attemptOutcome{exitCode: -1}
	finished := make([]bool, len(procs))
	remaining := started
	stopping := false
	var killTimer <-chan time.Time
	var abandonTimer <-chan time.Time
	stopAll := func(line string) {
		for i, rp := range procs {
			if rp != nil && i < started && !finished[i] {
				rp.ctl.Send(line)
			}
		}
	}
	beginStop := func(why string) {
		if stopping {
			return
		}
		stopping = true
		n := 0
		for i := 0; i < started; i++ {
			if !finished[i] {
				n++
			}
		}
		if why != "" {
			a.r.events.printf("%s: %s; stopping %d process(es)", a.prefix(), why, n)
		}
		stopAll("stop")
		killTimer = time.After(a.cfg.Job.StopGrace + 2*time.Second)
	}
	if startErr != nil {
		out.err, out.setupFailed, out.hostLost = startErr, true, cluster.IsConnectionLost(startErr)
		a.r.events.printf("%s: %v", a.prefix(), startErr)
		beginStop("")
	}
	hard := a.r.opts.Hard
	ctxDone := ctx.Done()
	ping := time.NewTicker(heartbeatEvery)
	defer ping.Stop()
	for remaining > 0 {
		select {
		case m := <-exits:
			remaining--
			finished[m.i] = true
			rp := procs[m.i]
			for _, w := range rp.outs {
				if c, ok := w.(io.Closer); ok {
					c.Close()
				}
			}
			rp.logFile.Close()
			text, code, lost := describeExit(m.err)
			a.r.record(rp.p, text, m.at.Sub(rp.started))
			if stopping {
				continue
			}
			if m.err != nil {
				out.exitCode, out.hostLost = code, lost
				out.reason = fmt.Sprintf("%s@%s exited %s", rp.p.Name(), rp.p.Host.Name, text)
				if cause := a.rootCause(byHost[rp.p.Host.Name], rp, lost); cause != "" {
					out.reason += ": " + cause
				}
				if lost {
					out.reason = fmt.Sprintf("%s@%s: %s lost: %v", rp.p.Name(), rp.p.Host.Name, hostLabel(rp.p.Host), m.err)
				}
				beginStop(out.reason)
				continue
			}
			if a.succeeded(pl, procs, finished) {
				out.success = true
				beginStop(a.successNote(procs, finished, started))
			}
		case <-ctxDone:
			ctxDone = nil
			out.interrupted = true
			if !stopping {
				beginStop("interrupted")
			}
		case <-hard:
			hard = nil
			a.r.events.printf("%s: killing every process now", a.prefix())
			stopAll("kill")
			abandonTimer = time.After(5 * time.Second)
		case <-killTimer:
			killTimer = nil
			a.r.events.printf("%s: grace period over; killing what is left", a.prefix())
			stopAll("kill")
			abandonTimer = time.After(5 * time.Second)
		case <-ping.C:
			for i, rp := range procs {
				if rp != nil && i < started && !finished[i] {
					rp.ctl.Ping()
				}
			}
		case <-abandonTimer:
			// Unreachable hosts never report back; closing the channels
			// makes their agents stop on their own when they can.
			a.r.events.printf("%s: %d process(es) did not report their exit; closing their connections", a.prefix(), remaining)
			cancel()
			abandonTimer = nil
		}
	}
	for _, rp := range procs {
		if rp != nil {
			rp.ctl.Close()
		}
	}
	if out.interrupted {
		out.success = false
	}
	if !out.success && !out.interrupted && out.reason == "" && out.err == nil {
		out.reason = "the group ended without meeting the success policy"
	}
	return out
}

// rootCause finds and records why a failed process failed (see
// rootCause), unless its host is gone and cannot say.
func (a *attempt_) rootCause(c *hostConn, rp *running, lost bool) string {
	if lost {
		return ""
	}
	var fsys cluster.FS
	if c != nil {
		fsys = c.fs
	}
	cause := rootCause(fsys, rp.p.Env["TORCHELASTIC_ERROR_FILE"], rp.stderrTail.String())
	a.r.recordCause(rp.p, cause)
	return cause
}

// succeeded applies the success policy to the processes that have exited
// (all with status 0, since any failure stops the group first).
func (a *attempt_) succeeded(pl *plan.Plan, procs []*running, finished []bool) bool {
	if a.cfg.Job.Framework != config.TensorFlow {
		for i := range procs {
			if !finished[i] {
				return false
			}
		}
		return true
	}
	hasChief := false
	for _, rp := range procs {
		if rp.p.Role == "chief" {
			hasChief = true
		}
	}
	for i, rp := range procs {
		role := rp.p.Role
		switch {
		case role == "chief":
			if !finished[i] {
				return false
			}
		case role == "worker":
			mustFinish := a.cfg.Job.SuccessPolicy != "chief" || (!hasChief && rp.p.Index == 0)
			if mustFinish && !finished[i] {
				return false
			}
		}
	}
	return true
}

func (a *attempt_) successNote(procs []*running, finished []bool, started int) string {
	left := 0
	for i := 0; i < started; i++ {
		if !finished[i] {
			left++
		}
	}
	if left == 0 {
		return ""
	}
	return "success policy met (" + a.cfg.Job.SuccessPolicy + ")"
}
