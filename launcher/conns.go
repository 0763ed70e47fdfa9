package launcher

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
)

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
	// left on the host ("" before one); see checkPhase.
	pushed string
}

// conn is c as the host I/O the run shares with the verbs takes it.
func (c *hostConn) conn() *hostio.Conn {
	return &hostio.Conn{Host: c.host, T: c.t, FS: c.fs, Home: c.home, AgentPath: c.agent}
}

// client is c's agent, for the commands the run runs there.
func (c *hostConn) client() remote.Client { return c.conn().Agent() }

// connPool keeps a run's connections from one attempt to the next. Dialling
// a host, opening its file access and checking its agent cost 10 to 20
// round trips, which a restart paid on every host when each attempt dialled
// afresh; a kept connection costs a keepalive at most (see reuse). A host is
// dialled again only when its connection died or its entry in the inventory
// now points elsewhere (it moved, see sameEndpoint). The workdir leases
// ride the same connections (leaseDialer). The run closes the pool at its
// end, after the leases were given back.
type connPool struct {
	mu    sync.Mutex
	conns map[string]*hostConn // by host name
	// reached names every host the run ever connected to, also after its
	// connection was closed: one that fails now is waited for (it was
	// there, it may come back), one never reached is more likely a
	// mistake in its address (see connectPhase.connect).
	reached map[string]bool
	// redials serialises, per host, the redials of a connection that
	// died under an attempt (redial).
	redials map[string]*sync.Mutex
}

func newConnPool() *connPool {
	return &connPool{conns: map[string]*hostConn{}, reached: map[string]bool{}, redials: map[string]*sync.Mutex{}}
}

// wasReached reports whether the run ever connected to the host named.
func (p *connPool) wasReached(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reached[name]
}

// redial returns a live connection to old's host in place of old, which
// died under an attempt: the pool's, when another caller replaced old
// already (the host's other processes ask too), else one dial makes,
// which then replaces old in the pool. The next attempt reuses it, so
// that asking the host something after a lost connection (an agent's
// record of its exit, recordedExit) costs no dial more than the restart's
// own.
func (p *connPool) redial(old *hostConn, dial func() (*hostConn, error)) (*hostConn, error) {
	name := old.host.Name
	p.mu.Lock()
	mu := p.redials[name]
	if mu == nil {
		mu = &sync.Mutex{}
		p.redials[name] = mu
	}
	p.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	p.mu.Lock()
	cur := p.conns[name]
	p.mu.Unlock()
	if cur != nil && cur != old {
		return cur, nil
	}
	c, err := dial()
	if err != nil {
		return nil, err
	}
	p.add(c)
	return c, nil
}

// redialed reports whether a redial replaced c, the attempt's connection
// to its host, in the pool: the host answered after c died.
func (p *connPool) redialed(c *hostConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.conns[c.host.Name]
	return cur != nil && cur != c
}

// pingTimeout bounds the keepalive that checks a kept connection: one that
// does not answer within it is dropped and the host dialled again.
const pingTimeout = 5 * time.Second

// sameEndpoint reports whether a connection made for a still reaches b as
// the inventory now describes it: the same host at the same address, port,
// user, key and route. Other fields (GPUs, env, workdir) do not touch the
// connection.
func sameEndpoint(a, b config.Host) bool {
	return a.Name == b.Name && a.Address == b.Address && a.Transport == b.Transport && a.User == b.User &&
		a.Port == b.Port && a.IdentityFile == b.IdentityFile && a.KnownHosts == b.KnownHosts && a.ProxyJump == b.ProxyJump
}

// reuse returns, per host, its kept connection when it still reaches the
// host and answers a keepalive (all hosts at once), with host updated to
// this attempt's entry; nil where the host must be dialled. Connections
// that are dead or point elsewhere are closed.
func (p *connPool) reuse(ctx context.Context, hosts []config.Host) []*hostConn {
	out := make([]*hostConn, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		p.mu.Lock()
		c := p.conns[h.Name]
		p.mu.Unlock()
		if c == nil {
			continue
		}
		if !sameEndpoint(c.host, h) {
			p.drop(c)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			defer cancel()
			if err := cluster.Ping(pctx, c.t); err != nil {
				// Closed, but kept until the redial replaces it
				// (add): a lease renewed meanwhile finds a dead
				// connection, fails and tries again, rather than
				// dialling one of its own.
				c.t.Close()
				return
			}
			p.mu.Lock()
			c.host = h
			p.mu.Unlock()
			out[i] = c
		}()
	}
	wg.Wait()
	return out
}

// add keeps c (a new connection) for later attempts, closing the one it
// replaces.
func (p *connPool) add(c *hostConn) {
	p.mu.Lock()
	old := p.conns[c.host.Name]
	p.conns[c.host.Name] = c
	p.reached[c.host.Name] = true
	p.mu.Unlock()
	if old != nil && old != c {
		old.t.Close()
	}
}

// drop forgets c and closes it.
func (p *connPool) drop(c *hostConn) {
	p.mu.Lock()
	if p.conns[c.host.Name] == c {
		delete(p.conns, c.host.Name)
	}
	p.mu.Unlock()
	c.t.Close()
}

// closeHosts closes the connections of the named hosts: their connection
// was lost (no answer to keepalives), so a ping before reusing it would
// only wait out pingTimeout, while a closed one fails at once. They are
// kept until the redial replaces them (add), as reuse keeps a dead one:
// a lease renewed or checked meanwhile then fails and tries again, rather
// than dialling a connection of its own beside the attempt's.
func (p *connPool) closeHosts(names map[string]bool) {
	p.mu.Lock()
	var gone []*hostConn
	for name := range names {
		if c := p.conns[name]; c != nil {
			gone = append(gone, c)
		}
	}
	p.mu.Unlock()
	for _, c := range gone {
		c.t.Close()
	}
}

// keepOnly closes the connections of hosts that are not in use (a host
// replaced by a spare, or gone from the inventory).
func (p *connPool) keepOnly(hosts []config.Host) {
	in := map[string]bool{}
	for _, h := range hosts {
		in[h.Name] = true
	}
	p.mu.Lock()
	var gone []*hostConn
	for name, c := range p.conns {
		if !in[name] {
			gone = append(gone, c)
			delete(p.conns, name)
		}
	}
	p.mu.Unlock()
	for _, c := range gone {
		c.t.Close()
	}
}

// forgetPrepared makes the next attempt start over on every host: after a
// setup failure something on a host may have changed under the run (the
// agent removed, the file access broken), so the kept connections and
// what they knew (agent installed, code pushed) are dropped and the hosts
// dialled again. Setup failures are rare and followed by a backoff; the
// round trips are saved where restarts are common, after the job failed.
func (p *connPool) forgetPrepared() {
	p.closeAll()
}

// closeAll closes every connection; the run's last step.
func (p *connPool) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[string]*hostConn{}
	p.mu.Unlock()
	for _, c := range conns {
		c.t.Close()
	}
}

// shared is the kept connection to h, if any reaches h as given.
func (p *connPool) shared(h config.Host) cluster.Transport {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[h.Name]; c != nil && sameEndpoint(c.host, h) {
		return c.t
	}
	return nil
}

// leaseDialer gives the workdir leases the run's own connections: a lease
// taken or renewed on a host with a kept connection costs no dial of its
// own. The lease holder closes what its dialer returns when it gives up on
// it; closing a shared connection is left to the pool (noClose). Without
// a kept connection (the host is being redialled) it dials one of its own.
func (p *connPool) leaseDialer(dial func(context.Context, config.Host) (cluster.Transport, error)) func(context.Context, config.Host) (cluster.Transport, error) {
	return func(ctx context.Context, h config.Host) (cluster.Transport, error) {
		if t := p.shared(h); t != nil {
			return noClose{t}, nil
		}
		return dial(ctx, h)
	}
}

// noClose is a shared transport whose Close leaves the connection open.
type noClose struct{ cluster.Transport }

func (noClose) Close() error { return nil }

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

func hostLabel(h config.Host) string { return hostio.Label(h) }

func remoteAbs(home, p string) string { return hostio.Abs(home, p) }

const pidDir = hostio.PidDir
