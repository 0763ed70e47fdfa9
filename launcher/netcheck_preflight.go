package launcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// netPreflightBudget bounds the measuring of preflight = ["net"]: each
// link gets this divided by the rounds, between netLinkMin and
// DefaultNetDuration.
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
			h := rep.host(rep.Slowest)
			p.events.printf("%s: network check: slowest host %s at %s", p.prefix(), h.Name, config.FormatBandwidth(h.Rate))
		}
		cerr := CheckMinBandwidth(rep, p.cfg.Job.MinBandwidth)
		var ne *NetError
		if !errors.As(cerr, &ne) {
			return conns, cerr
		}
		if err := p.swapOut(ctx, conns, ne); err != nil {
			return nil, err
		}
	}
}

// measureNet installs the agent where needed and measures conns' links.
func (p *connectPhase) measureNet(ctx context.Context, conns []*hostConn) (*NetReport, error) {
	peers := make([]*netPeer, len(conns))
	err := forEach(conns, func(c *hostConn) error {
		bin, err := remote.Install(ctx, c.t, p.agents())
		if err != nil {
			return err
		}
		peers[slices.Index(conns, c)] = &netPeer{host: c.host, t: c.t, agent: bin}
		return nil
	})
	if err != nil {
		return nil, err
	}
	setIfaces(ctx, p.cfg.Job, peers)
	d := DefaultNetDuration
	if len(peers) > 1 {
		d = max(netLinkMin, min(d, netPreflightBudget/time.Duration(len(peers)-1)))
	}
	return checkNet(ctx, peers, d), nil
}

// swapOut replaces each host ne names by a spare, for the rest of the
// run; an error when no spare is left.
func (p *connectPhase) swapOut(ctx context.Context, conns []*hostConn, ne *NetError) error {
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
