package launcher

import (
	"context"
	"fmt"
	"path"
	"slices"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/lease"
)

// The prepare phase of an attempt (see attempt): the agent installed,
// file access and the home directory opened, the workdirs leased
// (holdWorkdirs), each beside the others.

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

// preparePhase installs the agents, opens file access and leases the
// workdirs of the attempt's hosts (see prepare).
type preparePhase struct {
	phaseEnv
	agents agentsFunc
	// opts and dial make a lease's own connection to a host whose kept
	// one is being redialled (connPool.leaseDialer).
	opts   cluster.DialOptions
	dial   dialer
	pool   *connPool
	leases *lease.Holder
}

func (p *preparePhase) name() string { return "files and lease" }

func (p *preparePhase) cleanup() {}

// run makes the attempt's hosts over the pooled connections and prepares
// them; st.installed says when the agents' install is done.
func (p *preparePhase) run(ctx context.Context, st *attemptState) error {
	st.conns = newAttemptHosts(st.pooled)
	var err error
	st.installed, err = p.prepare(ctx, st.conns)
	return err
}

// prepare starts installing the agents and opens file access and the
// leases beside it; installed says when the install is done. The agent
// needs nothing but the connection, the lease nothing but file access,
// the push nothing but the lease: each starts as soon as what it needs is
// there, beside the others (on a fresh host the agent's upload and the
// first push overlap).
func (p *preparePhase) prepare(ctx context.Context, conns []*attemptHost) (installed <-chan error, err error) {
	done := make(chan error, 1)
	go func() { done <- p.installAgents(ctx, conns) }()
	err = p.openFiles(ctx, conns)
	if err == nil {
		err = waitTold(ctx, conns)
	}
	if err == nil {
		err = p.holdWorkdirs(ctx, conns)
	}
	return done, err
}

// installAgents installs the agent on every connection that an earlier
// attempt did not install it over (a kept connection's agent was checked
// when it was installed; after a setup failure the next attempt starts on
// new connections, see forgetPrepared). It sets hostConn.agent and nothing
// else (on the host it also creates the workdir's state directory, which
// the lease would create otherwise), so it runs beside the other setup
// steps.
func (p *preparePhase) installAgents(ctx context.Context, conns []*attemptHost) error {
	return forEach(conns, func(c *attemptHost) error {
		defer c.tell("", false) // nothing learnt, or failed
		defer c.installDone()
		if c.agent != "" {
			return nil
		}
		// The lease, taken beside the install, then finds the
		// workdir's state directory there (see lease.File).
		wd := c.host.Workdir
		in, err := remote.InstallWith(ctx, c.t, p.agents(), remote.InstallOptions{
			Dirs: []string{wd, path.Join(wd, path.Dir(lease.File))},
			Told: func(home string, made []string) { c.tell(home, slices.Contains(made, wd)) },
		})
		c.agent = in.Path
		return err // "install drover agent on <host> (<address>): ..."
	})
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

// openFiles opens file access and learns the home directory on every
// connection that does not have them yet.
func (p *preparePhase) openFiles(ctx context.Context, conns []*attemptHost) error {
	return forEach(conns, func(c *attemptHost) error {
		if c.fs != nil {
			return nil
		}
		fsys, err := c.t.FS(ctx)
		if err != nil {
			return fmt.Errorf("open files on %s: %w", hostLabel(c.host), err)
		}
		home, err := toldHome(ctx, c, fsys)
		if err != nil {
			return fmt.Errorf("home directory on %s: %w", hostLabel(c.host), err)
		}
		c.fs, c.home = fsys, home
		return nil
	})
}

// toldHome is c's home directory: what the agent's install said of it, or
// what fsys says, whichever comes first. The install's command says it
// about when SFTP has opened, a round trip before an SFTP request for it
// would answer; on Slurm, where a step takes a while to start, SFTP's
// answer may come first.
func toldHome(ctx context.Context, c *attemptHost, fsys cluster.FS) (string, error) {
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

// holdWorkdirs takes the lease of every host's workdir before the
// attempt touches it (push, leftovers, start), over the run's kept
// connections (connPool.leaseDialer); on a restart the leases are held
// already and this costs nothing. A live run holding one is a
// *lease.HeldError: nothing was changed on any host.
func (p *preparePhase) holdWorkdirs(ctx context.Context, conns []*attemptHost) error {
	targets := make([]lease.Target, len(conns))
	for i, c := range conns {
		// Absolute: the lease then needs no request for the home.
		targets[i] = lease.Target{Host: c.host, Workdir: remoteAbs(c.home, c.host.Workdir)}
	}
	opts := p.opts
	opts.Inventory = config.Endpoints(p.cfg.Hosts)
	dial := p.pool.leaseDialer(func(ctx context.Context, h config.Host) (cluster.Transport, error) {
		return p.dial.dial(ctx, h, opts)
	})
	err := p.leases.Acquire(ctx, dial, targets)
	p.leases.Keep(targets)
	return err
}
