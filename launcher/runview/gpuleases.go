package runview

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/gpulease"
	"github.com/droverhq/drover/launcher/hostio"
)

// GPULeaseRow is a GPU lease, or a run waiting for GPUs (Waiting), on a
// host of the inventory, as `drover ps --inventory` lists them.
type GPULeaseRow struct {
	Host    string
	Waiting bool
	gpulease.Holder
}

// HostGPULeases are the live GPU leases and the queues of the hosts in
// the inventory (or job) file, whoever holds them (package gpulease);
// each host within wait, all at once, as HostRuns. A host that cannot
// be read is named in the error, the others listed all the same.
func HostGPULeases(ctx context.Context, inventory string, dial cluster.DialOptions, agentBinary string, wait time.Duration) ([]GPULeaseRow, error) {
	cfg, err := config.Load(inventory, config.LoadOptions{HostsOnly: true})
	if err != nil {
		return nil, err
	}
	dial.Inventory = config.Endpoints(cfg.Hosts)
	agents := remote.FindAgents(agentBinary)
	var mu sync.Mutex
	var rows []GPULeaseRow
	var msgs []string
	var wg sync.WaitGroup
	for _, h := range cfg.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, hostWait(wait))
			defer cancel()
			got, err := leasesOf(hctx, h, dial, agents)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				msgs = append(msgs, fmt.Sprintf("%s: GPU leases: %v", h.Name, err))
			}
			rows = append(rows, got...)
		}()
	}
	wg.Wait()
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.Waiting != b.Waiting {
			return !a.Waiting
		}
		if a.Waiting {
			return a.Since.Before(b.Since)
		}
		return a.GPU < b.GPU
	})
	if len(msgs) > 0 {
		sort.Strings(msgs)
		return rows, fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return rows, nil
}

// leasesOf reads host h's leases and queue through its agent.
func leasesOf(ctx context.Context, h config.Host, dial cluster.DialOptions, agents remote.Agents) ([]GPULeaseRow, error) {
	c := hostio.Conn{Host: h}
	var err error
	if c.T, err = cluster.Dial(ctx, h.Endpoint(), dial); err != nil {
		return nil, err
	}
	defer c.T.Close()
	if c.AgentPath, err = remote.Install(ctx, c.T, agents); err != nil {
		return nil, err
	}
	l, err := c.Agent().GPULeases(ctx, gpulease.DefaultDir)
	if err == nil && l.Error != "" {
		err = fmt.Errorf("%s", l.Error)
	}
	var rows []GPULeaseRow
	for _, x := range l.Leases {
		rows = append(rows, GPULeaseRow{Host: h.Name, Holder: x})
	}
	for _, w := range l.Waiters {
		rows = append(rows, GPULeaseRow{Host: h.Name, Waiting: true, Holder: w.Holder})
	}
	return rows, err
}

// RenderGPULeases writes rows for people: who holds which GPU, and who
// waits, per host.
func RenderGPULeases(w io.Writer, rows []GPULeaseRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no GPU leases")
		return
	}
	fmt.Fprintf(w, "%-16s %-8s %-20s %-12s %-24s %s\n", "HOST", "GPU", "JOB", "USER", "RUN", "SINCE")
	for _, r := range rows {
		gpu := fmt.Sprint(r.GPU)
		if r.Waiting {
			gpu = "waiting"
		}
		fmt.Fprintf(w, "%-16s %-8s %-20s %-12s %-24s %s (controller %s, pid %d)\n", r.Host, gpu, r.Job, r.User, r.RunID,
			r.Since.UTC().Format(time.RFC3339), r.Holder.Host, r.PID)
	}
}
