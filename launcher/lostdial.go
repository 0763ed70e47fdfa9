package launcher

import (
	"context"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
)

// lostState is the runner's memory of the hosts whose connection was lost
// (no reply to keepalives) in the attempt that just ended.
type lostState struct {
	lostMu sync.Mutex
	lost   map[string]bool
}

// noteLost records that host's connection was lost.
func (l *lostState) noteLost(host string) {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	if l.lost == nil {
		l.lost = map[string]bool{}
	}
	l.lost[host] = true
}

// takeLost returns the hosts lost since the last call and forgets them.
func (l *lostState) takeLost() map[string]bool {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	out := l.lost
	l.lost = nil
	return out
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
