package stage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
	"github.com/droverhq/drover/launcher/plan"
)

// Connect reaches every host of hosts at once for `drover stage`: it
// dials, opens file access, reads the home and installs drover's agent,
// which runs the ends of the direct copies. close ends every connection.
// A host that cannot be reached fails the whole: a data set staged onto
// some hosts only would be found missing by the run.
func Connect(ctx context.Context, hosts []config.Host, dial cluster.DialOptions, agents remote.Agents) (out []Host, close func(), err error) {
	out = make([]Host, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = connect(ctx, h, dial, agents)
		}()
	}
	wg.Wait()
	close = func() {
		for _, h := range out {
			if h.T != nil {
				h.T.Close()
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		close()
		return nil, func() {}, err
	}
	return out, close, nil
}

func connect(ctx context.Context, h config.Host, dial cluster.DialOptions, agents remote.Agents) (Host, error) {
	t, err := cluster.Dial(ctx, h.Endpoint(), dial)
	if err != nil {
		return Host{}, fmt.Errorf("connect to %s: %w", hostio.Label(h), err)
	}
	out := Host{Name: h.Name, T: t, Addr: plan.HostAddress(h)}
	fail := func(what string, err error) (Host, error) {
		t.Close()
		return Host{}, fmt.Errorf("%s on %s: %w", what, hostio.Label(h), err)
	}
	if out.FS, err = t.FS(ctx); err != nil {
		return fail("open file access", err)
	}
	if out.Home, err = out.FS.Home(); err != nil {
		return fail("read the home directory", err)
	}
	out.Workdir = hostio.Abs(out.Home, h.Workdir)
	bin, err := remote.Install(ctx, t, agents)
	if err != nil {
		return fail("install drover's agent", err)
	}
	out.Peer = remote.Client{T: t, Path: bin}
	return out, nil
}
