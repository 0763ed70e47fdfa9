package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// The connect phase of an attempt (see attempt): every host dialled, or
// its kept connection reused, and a spare for a host that stays unreachable.

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
	a.r.pool.closeHosts(lost)
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

// configFor is the job as the connected hosts run it: spares in place of
// the hosts they replaced.
func (a *attempt) configFor(conns []*hostConn) *config.Config {
	cfg := *a.cfg
	cfg.Hosts = make([]config.Host, len(conns))
	for i, c := range conns {
		cfg.Hosts[i] = c.host
	}
	return &cfg
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

// isUnreachable tells network failures, which are worth waiting for, from
// permanent ones (a refused host key, failed authentication, a mistake in
// the configuration).
func isUnreachable(err error) bool {
	return cluster.IsUnreachable(err)
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
