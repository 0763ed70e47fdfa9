package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/push"
	"github.com/droverhq/drover/launcher/container"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/plan"
	"github.com/droverhq/drover/launcher/setup"
)

// The scan, push and setup phases of an attempt (see attempt): the code
// directory scanned here while the hosts are connected, then pushed to
// every workdir (slurm.go: which hosts share one), then the job's setup
// run where it is due.

// pushPhase scans the code directory (scan, started before connect) and
// pushes it to every workdir; the side-by-side check (checkPhase) reads
// its outcome.
type pushPhase struct {
	phaseEnv
	now func() time.Time
	// logRoot and cacheDir are the run's (pushOptions).
	logRoot, cacheDir string
	outcome           pushOutcome
}

func (p *pushPhase) name() string { return "push" }

func (p *pushPhase) cleanup() {}

func (p *pushPhase) run(ctx context.Context, st *attemptState) error {
	p.outcome = p.push(ctx, st.conns, st.scan)
	return p.outcome.err
}

// scan scans the code directory in the background: it is local work that
// needs no host, so it runs while the hosts are connected and prepared.
func (p *pushPhase) scan() *scanned {
	// The same rule as `drover push` (pushOptions). What is about to run
	// is checked (sizes and mtimes): a file edited or deleted on a host
	// since the last push is put back.
	sc := &scanned{done: make(chan struct{}), opts: pushOptions(p.cfg, p.logRoot, p.cacheDir, push.VerifyStat)}
	opts := sc.opts // the scan's own copy
	go func() {
		defer close(sc.done)
		start := p.now()
		sc.tree, sc.err = scanLocal(p.cfg.Job.Code, opts)
		p.events.debugf("%s: setup: scan of %s took %s", p.prefix(), p.cfg.Job.Code, p.now().Sub(start).Round(time.Millisecond))
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
func (p *pushPhase) push(ctx context.Context, conns []*attemptHost, sc *scanned) pushOutcome {
	<-sc.done
	tree, opts, err := sc.tree, sc.opts, sc.err
	if err != nil {
		return pushOutcome{err: fmt.Errorf("scan code directory %s: %w", p.cfg.Job.Code, err)}
	}
	for _, w := range tree.Warnings {
		p.events.printf("%s: push: warning: %s", p.prefix(), w)
	}
	p.warnChanging(tree.Changing)
	var changed atomic.Bool
	err = forEach(p.pushTargets(conns), func(c *attemptHost) error {
		o := opts
		o.NewWorkdir = c.newWorkdir.Load()
		res, err := push.SyncSteady(ctx, c.fs, hostLabel(c.host), tree, c.host.Workdir, o)
		// As `drover push` shows them: what did not stop the push but
		// the user should hear of (the tar fallback, a link left alone
		// on the host).
		for _, w := range res.Warnings {
			p.events.printf("%s: push to %s: warning: %s", p.prefix(), c.host.Name, w)
		}
		p.warnChanging(res.Changing)
		if err != nil {
			return err
		}
		fresh := ""
		if o.NewWorkdir {
			fresh = " (into a workdir the install made: nothing to compare)"
		}
		p.events.debugf("%s: setup: push to %s took %s%s", p.prefix(), c.host.Name, res.Duration.Round(time.Millisecond), fresh)
		if res.FilesSent > 0 || res.FilesDeleted > 0 {
			changed.Store(true)
			p.events.printf("%s: pushed %d file(s) (%d bytes), deleted %d on %s", p.prefix(), res.FilesSent, res.BytesSent, res.FilesDeleted, c.host.Name)
		}
		return nil
	})
	return pushOutcome{changed: changed.Load(), err: err}
}

// warnChanging warns of each file that kept changing while pushed (a log
// in the code directory), once per run: every attempt and every host
// meets it again, and the fix (exclude it) is the same.
func (p *pushPhase) warnChanging(cs []push.Changing) {
	for _, c := range cs {
		p.events.printOnce("push-changing\x00"+c.Path, "%s: push: warning: %s", p.prefix(), c.Warning())
	}
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

// pushTargets are the hosts whose workdir gets the code (workdirClaims).
// A node reached over Slurm that does not see this machine's workdir has
// one of its own and gets its own push, as over SSH, and the events say so.
func (p *pushPhase) pushTargets(conns []*attemptHost) []*attemptHost {
	var out []*attemptHost
	claims := newWorkdirClaims(p.cfg.Job.Code)
	for _, c := range conns {
		if claims.skip(c.host, c.t, c.home) != "" {
			continue
		}
		if _, shared := sharedWorkdir(c.host, c.t, c.home); !shared && c.host.Transport == config.TransportSlurm {
			p.events.printf("%s: workdir %s is not shared with node %s: pushing", p.prefix(), remoteAbs(c.home, c.host.Workdir), c.host.Name)
		}
		out = append(out, c)
	}
	return out
}

// setupPhase runs the job's setup (package setup) after the push, on the
// hosts of this attempt that this run has not set up yet: every host at
// the first attempt, a spare that joins later. A restart of the same hosts
// runs none, so a crash loop never re-installs an environment; on a host
// it does reach, setup.Decide skips an environment that is current.
type setupPhase struct {
	phaseEnv
	// out is the terminal (not when quiet); runDir receives each host's
	// log.
	out    io.Writer
	quiet  bool
	runDir string
	done   *setupDone
}

// setupDone names the hosts this run has set up (or found set up).
type setupDone struct {
	mu    sync.Mutex
	hosts map[string]bool
}

func (d *setupDone) has(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hosts[name]
}

func (d *setupDone) add(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hosts == nil {
		d.hosts = map[string]bool{}
	}
	d.hosts[name] = true
}

func (p *setupPhase) name() string { return "setup" }

func (p *setupPhase) cleanup() {}

// pending are the hosts of conns this phase would set up: those this run
// has not, one per shared workdir (Slurm nodes that share this machine's
// filesystem share one environment).
func (p *setupPhase) pending(conns []*attemptHost) []setup.Host {
	if p == nil || len(p.cfg.Job.Setup) == 0 { // nil: a check without one (tests)
		return nil
	}
	var hosts []setup.Host
	seen := map[string]bool{}
	for _, c := range conns {
		if p.done.has(c.host.Name) {
			continue
		}
		wd, shared := sharedWorkdir(c.host, c.t, c.home)
		if !shared {
			wd = hostio.Abs(c.home, c.host.Workdir)
		} else if seen[wd] {
			p.done.add(c.host.Name)
			continue
		}
		seen[wd] = true
		hosts = append(hosts, setup.Host{Name: c.host.Name, T: c.t, FS: c.fs, Workdir: wd, Env: setup.HostEnv(p.cfg, c.host)})
	}
	return hosts
}

// run sets up the pending hosts; a failure on any is a *setup.Error
// (see attempt.run: nothing starts, and no restart would fix it).
func (p *setupPhase) run(ctx context.Context, st *attemptState) error {
	hosts := p.pending(st.conns)
	if len(hosts) == 0 {
		return nil
	}
	opts := setup.ForJob(p.cfg)
	opts.LogDir = p.runDir
	if !p.quiet {
		opts.Out = p.out
	}
	opts.Note = func(host string, d setup.Decision) {
		if d.Run {
			p.events.printf("%s: setup on %s: %s, running it", p.prefix(), host, d.Why)
		} else {
			p.events.debugf("%s: setup on %s skipped: %s", p.prefix(), host, d.Why)
		}
	}
	res, err := setup.Run(ctx, hosts, opts)
	for _, r := range res {
		if r.Err == nil {
			p.done.add(r.Host)
		}
	}
	return err
}

// containerPhase readies the hosts of an attempt for the job's container
// (package container), all at once, before the checks: the containers an
// earlier attempt's agent left in each workdir removed (an agent killed
// outright cannot remove its own, and one holding the host's network
// would fail preflight's port check), and on a host this run has not
// readied yet the image loaded or pulled. A failure names the host and
// the image; it would fail the same way again.
type containerPhase struct {
	phaseEnv
	// done names the hosts that have the image (runner.imaged).
	done *setupDone
}

// name is empty without a container: events.log notes no step that did
// nothing.
func (p *containerPhase) name() string {
	if p == nil || !p.cfg.Job.Container.Set() {
		return ""
	}
	return "container"
}

func (p *containerPhase) cleanup() {}

func (p *containerPhase) run(ctx context.Context, st *attemptState) error {
	if p == nil { // an attempt made without one (tests)
		return nil
	}
	c := p.cfg.Job.Container
	if !c.Set() {
		return nil
	}
	hosts := make([]container.Host, len(st.conns))
	for i, h := range st.conns {
		hosts[i] = container.Host{Name: h.host.Name, T: h.t, Workdir: remoteAbs(h.home, h.host.Workdir), Image: !p.done.has(h.host.Name)}
	}
	note := func(host, msg string) { p.events.printf("%s: %s: %s", p.prefix(), host, msg) }
	errs := container.Prepare(ctx, c, hosts, note)
	for i, err := range errs {
		if err == nil && hosts[i].Image {
			p.done.add(hosts[i].Name)
		}
	}
	return errors.Join(errs...)
}
