package launcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/elastic"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/netcheck"
	"github.com/droverhq/drover/launcher/plan"
)

// The connect phase of an attempt (see attempt): every host dialled, or
// its kept connection reused, and a spare for a host that stays unreachable.

// connectPhase connects the attempt's hosts (see connect), swaps out the
// slow ones on the first attempt (netPreflight) and leaves the
// connections and the job as they run it in the attempt's state.
type connectPhase struct {
	phaseEnv
	clock
	dial dialer
	// opts are the run's dial options (the inventory is added per dial).
	opts cluster.DialOptions
	pool *connPool
	// lost takes the hosts lost in the last attempt (lostState.takeLost).
	lost func() map[string]bool
	// replaced is the run's unreachable host name -> spare name.
	replaced map[string]string
	// reload re-reads the job and inventory while a host is waited for.
	reload func() (*config.Config, error)
	agents agentsFunc
	// left is the run's hosts left out of the group (min_hosts): lost
	// with no spare after host_wait; full is the last plan that ran on
	// every host (nil before one ran), which says what each host runs.
	left map[string]bool
	full func() *plan.Plan
	// fenced says whether the health gate keeps a host out for the rest
	// of the run: one left out for that is not dialled again.
	fenced func(host string) bool
}

func (p *connectPhase) name() string { return "connect" }

func (p *connectPhase) cleanup() {}

func (p *connectPhase) run(ctx context.Context, st *attemptState) error {
	p.forgetGone(st.hosts)
	pooled, err := p.connect(ctx, p.withoutFenced(st.hosts))
	if err == nil {
		pooled, err = p.netPreflight(ctx, pooled) // a slow host without a spare is final too
	}
	if err != nil {
		return err
	}
	st.pooled, st.cfg = pooled, configFor(p.cfg, pooled)
	if out := p.leftOut(st.hosts); len(out) > 0 {
		// A fixed TensorFlow worker count is lowered by the workers
		// of the hosts left out, so that the plan fits the rest.
		st.cfg = elastic.Config(st.cfg, p.full(), out)
	}
	return nil
}

// connect returns a connection to every host: the one an earlier attempt
// made when it still answers (connPool.reuse), else a new one. An
// unreachable host that the run reached before is retried for host_wait
// (waitFor) and then replaced by a spare, on a restart as on the first
// attempt's later hosts; one whose address never took a TCP connection
// from this run (refused, no route, timed out) is not waited for: that is
// a wrong address or port far more often than a host rebooting, and
// host_wait (5 minutes by default) would only hide it. It takes a spare
// at once, or fails the run naming the host, its address and the fix. A
// refused key or login fails at once. Every connection made joins the
// pool.
func (p *connectPhase) connect(ctx context.Context, hosts []config.Host) ([]*hostConn, error) {
	opts := p.dialOptions()
	lost := p.lost()
	p.pool.closeHosts(lost)
	conns := p.pool.reuse(ctx, hosts)
	deadline := p.now().Add(p.cfg.Job.HostWait) // host_wait counts from the first dial
	errs := p.dialMissing(ctx, hosts, conns, opts, p.boundedDials(lost))
	gone := map[int]error{} // lost with no spare: the group may shrink (min_hosts)
	for i, h := range hosts {
		err := errs[i]
		if err == nil {
			p.rejoin(h)
			continue
		}
		if p.n == 1 {
			if name, ok := unresolvable(err); ok {
				// A typo, not a host rebooting: waiting host_wait
				// (5 minutes by default) would not make it resolve.
				return nil, fmt.Errorf("%s: address %q does not resolve (%w); fix the address of host %s in %s",
					h.Name, name, err, h.Name, p.cfg.InventoryPath)
			}
		}
		never := neverConnected(err) && !p.pool.wasReached(h.Name)
		switch {
		case never:
			err = p.neverReached(h, err)
		case p.left[h.Name] && isUnreachable(err):
			// Waited for host_wait when it was left out: a restart of
			// the smaller group does not wait for it again.
		default:
			if conns[i], err = p.waitFor(ctx, h, err, deadline, opts); err == nil {
				continue
			}
		}
		if !isUnreachable(err) {
			return nil, err
		}
		if never && !hasSpare(p.cfg.Hosts) {
			return nil, err
		}
		spare, t, serr := p.takeSpare(ctx, hosts, opts)
		if serr != nil && !never && p.cfg.Job.MinHosts > 0 {
			gone[i] = fmt.Errorf("%w; %v", err, serr)
			continue
		}
		if serr != nil {
			return nil, fmt.Errorf("%w; %v", err, serr)
		}
		how := "unreachable"
		if never {
			how = "unreachable and never reached by this run"
			err = errs[i]
		}
		p.events.printf("%s: %s (%s) %s: %v; replaced by spare %s (%s)", p.prefix(), h.Name, h.Address, how, err, spare.Name, spare.Address)
		p.replaced[h.Name] = spare.Name
		// It stands in for h now: the plan gives it h's ranks (a host
		// still marked spare would get none and the world would shrink).
		spare.Spare = false
		conns[i] = &hostConn{host: spare, t: t}
		p.pool.add(conns[i])
	}
	conns, err := p.shrink(hosts, conns, gone)
	if err != nil {
		return nil, err
	}
	p.pool.keepOnly(hostsIn(conns))
	return conns, nil
}

// stillWaitingEvery is how often waitFor says it still waits.
const stillWaitingEvery = 30 * time.Second

// waitFor dials h, an unreachable host the run reached before, every 2 s
// until deadline (host_wait from the first dial), re-reading the
// inventory each time: the user may be fixing the address while drover
// waits. It says when it starts waiting, every stillWaitingEvery how
// long is left, and when the host is back. It returns err at once when
// err is not worth waiting for or host_wait is spent.
func (p *connectPhase) waitFor(ctx context.Context, h config.Host, err error, deadline time.Time, opts cluster.DialOptions) (*hostConn, error) {
	if !isUnreachable(err) || !p.now().Before(deadline) {
		return nil, err
	}
	p.events.printf("%s: %s (%s) unreachable, waiting up to %s for it: %v", p.prefix(), h.Name, h.Address, p.cfg.Job.HostWait, err)
	note := p.now().Add(stillWaitingEvery)
	for {
		if serr := p.sleep(ctx, min(2*time.Second, deadline.Sub(p.now()))); serr != nil {
			return nil, serr
		}
		if now := p.now(); !now.Before(note) && now.Before(deadline) {
			p.events.printf("%s: still waiting for %s (%s), %s left", p.prefix(), h.Name, h.Address, deadline.Sub(now).Round(time.Second))
			note = now.Add(stillWaitingEvery)
		}
		if cfg, lerr := p.reload(); lerr == nil {
			for _, nh := range cfg.Hosts {
				if nh.Name == h.Name {
					h = nh
				}
			}
		}
		wopts := opts
		wopts.ConnectTimeout = waitDialTimeout(opts.ConnectTimeout, deadline.Sub(p.now()))
		var t cluster.Transport
		if t, err = p.dial.dial(ctx, h, wopts); err == nil {
			c := &hostConn{host: h, t: t}
			p.pool.add(c)
			p.events.printf("%s: %s (%s) is back", p.prefix(), h.Name, h.Address)
			return c, nil
		}
		if !isUnreachable(err) || !p.now().Before(deadline) {
			return nil, err
		}
	}
}

// hasSpare reports whether the inventory has a spare host at all.
func hasSpare(hosts []config.Host) bool {
	return slices.ContainsFunc(hosts, func(h config.Host) bool { return h.Spare })
}

// neverConnected reports a dial that failed before any TCP connection was
// made (refused, no route, timed out): nothing answered at the address
// and port. A connection that broke during the SSH handshake (sshd
// starting, MaxStartups) or a jump host's failure to reach the target
// does not count: there the host may well be on its way.
func neverConnected(err error) bool {
	var oe *net.OpError
	var de *net.DNSError // a resolver that failed may answer next time
	return cluster.IsUnreachable(err) && errors.As(err, &oe) && oe.Op == "dial" && !errors.As(err, &de)
}

// neverReached is err, a dial of h that never connected, with the fix:
// the address and port are where a first-hour mistake usually is.
func (p *connectPhase) neverReached(h config.Host, err error) error {
	try := "ssh " + h.Address
	if h.Port != 0 {
		try = fmt.Sprintf("ssh -p %d %s", h.Port, h.Address)
	}
	return fmt.Errorf("%w; %s (%s) was never reached by this run, so drover does not wait host_wait for it: "+
		"check its address and port in %s (`%s` must connect), and that the host is up with sshd listening",
		err, h.Name, h.Address, p.cfg.InventoryPath, try)
}

// dialOptions are the run's dial options with the inventory's hosts (a
// ProxyJump may name one).
func (p *connectPhase) dialOptions() cluster.DialOptions {
	opts := p.opts
	opts.Inventory = config.Endpoints(p.cfg.Hosts)
	return opts
}

// configFor is job as the connected hosts run it: spares in place of the
// hosts they replaced.
func configFor(job *config.Config, conns []*hostConn) *config.Config {
	cfg := *job
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
func (p *connectPhase) dialMissing(ctx context.Context, hosts []config.Host, conns []*hostConn, opts cluster.DialOptions, lost map[string]bool) []error {
	var fresh []config.Host
	var at []int
	for i, c := range conns {
		if c == nil {
			fresh = append(fresh, hosts[i])
			at = append(at, i)
		}
	}
	errs := make([]error, len(hosts))
	ts, ferrs := p.dialFirst(ctx, fresh, opts, lost)
	for k, i := range at {
		if errs[i] = ferrs[k]; errs[i] == nil {
			conns[i] = &hostConn{host: hosts[i], t: ts[k]}
			p.pool.add(conns[i])
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
func (p *connectPhase) takeSpare(ctx context.Context, inUse []config.Host, opts cluster.DialOptions) (config.Host, cluster.Transport, error) {
	used := map[string]bool{}
	for _, h := range inUse {
		used[h.Name] = true
	}
	for _, v := range p.replaced {
		used[v] = true
	}
	var lastErr error
	for _, h := range p.cfg.Hosts {
		if !h.Spare || used[h.Name] {
			continue
		}
		t, err := p.dial.dial(ctx, h, opts)
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

// dialFirst is connect's first dial of every host at once. A host whose
// connection was lost in the previous attempt is most likely still gone:
// its dial is bounded by host_wait as the dials made while waiting for it
// are (waitDialTimeout), so that a restart does not spend a whole connect
// timeout (10 s by default) on it before host_wait even starts. Every
// other host gets the configured timeout.
func (p *connectPhase) dialFirst(ctx context.Context, hosts []config.Host, opts cluster.DialOptions, lost map[string]bool) ([]cluster.Transport, []error) {
	var gone, rest []int
	for i, h := range hosts {
		if lost[h.Name] {
			gone = append(gone, i)
		} else {
			rest = append(rest, i)
		}
	}
	if len(gone) == 0 {
		return p.dial.dialAll(ctx, hosts, opts)
	}
	bounded := opts
	bounded.ConnectTimeout = waitDialTimeout(opts.ConnectTimeout, p.cfg.Job.HostWait)
	ts, errs := make([]cluster.Transport, len(hosts)), make([]error, len(hosts))
	var wg sync.WaitGroup
	for _, part := range []struct {
		idx  []int
		opts cluster.DialOptions
	}{{gone, bounded}, {rest, opts}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := make([]config.Host, len(part.idx))
			for k, i := range part.idx {
				sub[k] = hosts[i]
			}
			pts, perrs := p.dial.dialAll(ctx, sub, part.opts)
			for k, i := range part.idx {
				ts[i], errs[i] = pts[k], perrs[k]
			}
		}()
	}
	wg.Wait()
	return ts, errs
}

// netPreflightBudget bounds the measuring of preflight = ["net"]: each
// link gets this divided by the rounds, between netLinkMin and
// netcheck.DefaultDuration.
const (
	netPreflightBudget = 30 * time.Second
	netLinkMin         = 250 * time.Millisecond
)

// netPreflight is preflight = ["net"]: before the first attempt it
// measures the links between the connected hosts (checkNet) and swaps
// each host that is under min_bandwidth or could not be measured for a
// spare, then measures again with the spares, until every host passes.
// Without a spare left the run fails before anything starts, naming the
// host. Later attempts skip it: a link that degrades during the run
// shows in the run's speed, and restarts should be quick.
func (p *connectPhase) netPreflight(ctx context.Context, conns []*hostConn) ([]*hostConn, error) {
	if p.n != 1 || !slices.Contains(p.cfg.Job.Preflight, config.PreflightNet) {
		return conns, nil
	}
	for {
		rep, err := p.measureNet(ctx, conns)
		if err != nil {
			return nil, err
		}
		if rep.Slowest != "" {
			h := rep.HostNamed(rep.Slowest)
			p.events.printf("%s: network check: slowest host %s at %s", p.prefix(), h.Name, config.FormatBandwidth(h.Rate))
		}
		cerr := netcheck.CheckMinBandwidth(rep, p.cfg.Job.MinBandwidth)
		var ne *netcheck.SlowError
		if !errors.As(cerr, &ne) {
			return conns, cerr
		}
		if err := p.swapOut(ctx, conns, ne); err != nil {
			return nil, err
		}
	}
}

// measureNet installs the agent where needed and measures conns' links.
func (p *connectPhase) measureNet(ctx context.Context, conns []*hostConn) (*netcheck.Report, error) {
	peers := make([]hostio.Conn, len(conns))
	err := forEach(conns, func(c *hostConn) error {
		bin, err := remote.Install(ctx, c.t, p.agents())
		if err != nil {
			return err
		}
		peers[slices.Index(conns, c)] = hostio.Conn{Host: c.host, T: c.t, AgentPath: bin}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d := netcheck.DefaultDuration
	if len(peers) > 1 {
		d = max(netLinkMin, min(d, netPreflightBudget/time.Duration(len(peers)-1)))
	}
	return netcheck.Measure(ctx, p.cfg.Job, peers, d), nil
}

// swapOut replaces each host ne names by a spare, for the rest of the
// run; an error when no spare is left.
func (p *connectPhase) swapOut(ctx context.Context, conns []*hostConn, ne *netcheck.SlowError) error {
	opts := p.dialOptions()
	for _, bad := range ne.Hosts {
		i := slices.IndexFunc(conns, func(c *hostConn) bool { return c.host.Name == bad.Name })
		if i < 0 {
			continue
		}
		inUse := make([]config.Host, len(conns))
		for k, c := range conns {
			inUse[k] = c.host
		}
		spare, t, err := p.takeSpare(ctx, inUse, opts)
		if err != nil {
			return fmt.Errorf("%w; preflight = [\"net\"] keeps %s out: %v", ne, bad.Name, err)
		}
		orig := bad.Name
		for o, sp := range p.replaced {
			if sp == bad.Name {
				orig = o // a spare that failed: its host gets the next one
			}
		}
		p.replaced[orig] = spare.Name
		p.events.printf("%s: %s kept out by the network check; replaced by spare %s (%s)", p.prefix(), bad.Name, spare.Name, spare.Address)
		spare.Spare = false // it stands in for the host: the plan gives it its ranks
		conns[i] = &hostConn{host: spare, t: t}
		p.pool.add(conns[i])
		p.pool.keepOnly(append(inUse[:i:i], append([]config.Host{spare}, inUse[i+1:]...)...))
	}
	return nil
}

// The group's size across attempts (min_hosts): hosts lost with no spare
// left out while at least min_hosts remain (elastic.Decide), and back in
// once they answer.

// boundedDials are the hosts whose first dial is bounded by host_wait
// (dialFirst): those lost in the last attempt and those left out.
func (p *connectPhase) boundedDials(lost map[string]bool) map[string]bool {
	out := maps.Clone(lost)
	if out == nil {
		out = map[string]bool{}
	}
	for h := range p.left {
		out[h] = true
	}
	return out
}

// forgetGone forgets the hosts left out that are no longer among hosts
// (the inventory was edited): the group no longer counts them as left out.
func (p *connectPhase) forgetGone(hosts []config.Host) {
	for h := range p.left {
		if !slices.ContainsFunc(hosts, func(c config.Host) bool { return c.Name == h }) {
			delete(p.left, h)
		}
	}
}

// withoutFenced are hosts less those left out because the health gate
// keeps them out (attempt.keepOut): they do not rejoin.
func (p *connectPhase) withoutFenced(hosts []config.Host) []config.Host {
	return slices.DeleteFunc(slices.Clone(hosts), func(h config.Host) bool { return p.left[h.Name] && p.fenced(h.Name) })
}

// rejoin takes h, which answered, back into the group if it was left out.
func (p *connectPhase) rejoin(h config.Host) {
	if !p.left[h.Name] {
		return
	}
	delete(p.left, h.Name)
	p.events.printf("%s: %s (%s) answers again: it rejoins the group, which is planned afresh on every host it has", p.prefix(), h.Name, h.Address)
}

// leftOut are the hosts of hosts that are left out of the group.
func (p *connectPhase) leftOut(hosts []config.Host) []string {
	var out []string
	for _, h := range hosts {
		if p.left[h.Name] {
			out = append(out, h.Name)
		}
	}
	return out
}

// shrink leaves the hosts of gone (index in hosts -> why it is gone:
// unreachable for host_wait, no spare) out of conns when elastic.Decide
// lets the group go on without them, and says so; else the first one's
// error with why the group cannot go on.
func (p *connectPhase) shrink(hosts []config.Host, conns []*hostConn, gone map[int]error) ([]*hostConn, error) {
	if len(gone) == 0 {
		return conns, nil
	}
	names := make([]string, len(hosts))
	var lost []string
	var first error
	for i, h := range hosts {
		names[i] = h.Name
		if e, ok := gone[i]; ok {
			lost = append(lost, h.Name)
			if first == nil {
				first = e
			}
		}
	}
	pinned := elastic.PinnedFor(p.cfg.Job.Framework, p.full(), names)
	d, err := elastic.Decide(elastic.Input{Hosts: names, Lost: lost, MinHosts: p.cfg.Job.MinHosts, Pinned: pinned})
	if err != nil {
		return nil, fmt.Errorf("%w; %w", first, err)
	}
	kept := conns[:0:0]
	for i, c := range conns {
		if _, out := gone[i]; !out {
			kept = append(kept, c)
		}
	}
	for _, h := range d.Drop {
		p.left[h] = true
	}
	p.events.printf("%s: going on without %s (unreachable for host_wait %s and no spare left: %v): %d of %d hosts, min_hosts = %d; "+
		"the group is planned afresh on them and resumes from the newest checkpoint", p.prefix(), strings.Join(d.Drop, ", "),
		p.cfg.Job.HostWait, first, len(d.Keep), len(hosts), p.cfg.Job.MinHosts)
	return kept, nil
}

// regrowEvery is how often regrow = "checkpoint" looks for a new
// checkpoint; regrowDial bounds its dial of a host left out.
const (
	regrowEvery = time.Second
	regrowDial  = 5 * time.Second
)

// watchRegrow is regrow = "checkpoint" while the group runs: each time
// newest (the record's newest checkpoint) moves on, it dials the hosts
// left out (not those the health gate keeps out), and sends the first
// that answers, once; the run stops the group then and restarts it with
// that host (restart.Regrow), rather than wait for a failure to grow.
// Nothing to watch (no host left out, or another regrow) is a nil
// channel. stop ends the watch before the attempt's connections close.
func (p *connectPhase) watchRegrow(ctx context.Context, newest func() int) (back <-chan string, stop func()) {
	var hosts []config.Host
	for _, h := range p.cfg.Hosts {
		if p.left[h.Name] && !p.fenced(h.Name) {
			hosts = append(hosts, h)
		}
	}
	if p.cfg.Job.Regrow != config.RegrowCheckpoint || len(hosts) == 0 {
		return nil, func() {}
	}
	out := make(chan string, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	opts := p.dialOptions()
	opts.ConnectTimeout = regrowDial
	go func() {
		defer close(done)
		seen := newest()
		for p.sleep(ctx, regrowEvery) == nil {
			n := newest()
			if n <= seen {
				continue
			}
			seen = n
			for _, h := range hosts {
				if t, err := p.dial.dial(ctx, h, opts); err == nil {
					t.Close()
					out <- h.Name
					return
				}
			}
		}
	}()
	return out, func() { cancel(); <-done }
}
