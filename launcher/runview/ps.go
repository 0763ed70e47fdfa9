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
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
)

// HostRuns are the live detached runs found in the indexes of the hosts in
// the inventory (or job) file, whoever started them. Each host is asked
// within wait (hostio.DefaultHostWait when 0), all at once: one whose
// login hangs is named in the error, the others listed all the same. A
// process whose run id is not drover's is left out and its host named.
func HostRuns(ctx context.Context, inventory string, dial cluster.DialOptions, agentBinary string, wait time.Duration) ([]hostio.PsRow, error) {
	cfg, err := config.Load(inventory, config.LoadOptions{HostsOnly: true})
	if err != nil {
		return nil, err
	}
	dial.Inventory = config.Endpoints(cfg.Hosts)
	agents := remote.FindAgents(agentBinary)
	reps := make([]*agent.HostReport, len(cfg.Hosts))
	errs := make([]error, len(cfg.Hosts))
	var wg sync.WaitGroup
	for i, h := range cfg.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, hostWait(wait))
			defer cancel()
			if reps[i], errs[i] = indexOf(hctx, h, dial, agents); errs[i] != nil && hctx.Err() != nil && ctx.Err() == nil {
				errs[i] = &hostio.UnreachableError{Host: h.Name, Address: h.Address, After: hostWait(wait), Err: errs[i]}
			}
		}()
	}
	wg.Wait()
	byRun := map[string]*hostio.PsRow{}
	var msgs []string
	for i, h := range cfg.Hosts {
		if errs[i] != nil {
			msgs = append(msgs, errs[i].Error())
			continue
		}
		for _, p := range reps[i].Processes {
			if err := agent.CheckRunID(p.RunID); err != nil {
				msgs = append(msgs, fmt.Sprintf("%s: a live process's %v", h.Name, err))
				continue
			}
			row := byRun[p.RunID]
			if row == nil {
				row = &hostio.PsRow{RunID: p.RunID, Job: p.Job, State: agent.RunRunning, Attempt: p.Attempt}
				byRun[p.RunID] = row
			}
			row.Attempt = max(row.Attempt, p.Attempt)
			if len(row.Hosts) == 0 || row.Hosts[len(row.Hosts)-1] != h.Name {
				row.Hosts = append(row.Hosts, h.Name)
			}
		}
	}
	rows := []hostio.PsRow{}
	for _, r := range byRun {
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].RunID > rows[j].RunID })
	if len(msgs) > 0 {
		return rows, fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return rows, nil
}

// indexOf asks host h's agent for its index of live runs.
func indexOf(ctx context.Context, h config.Host, dial cluster.DialOptions, agents remote.Agents) (*agent.HostReport, error) {
	v := &hostio.View{Conn: hostio.Conn{Host: h}}
	if v.T, v.Err = cluster.Dial(ctx, h.Endpoint(), dial); v.Err != nil {
		return nil, v.Err
	}
	defer v.T.Close()
	if v.AgentPath, v.Err = remote.Install(ctx, v.T, agents); v.Err != nil {
		return nil, v.Err
	}
	return v.Runs(ctx)
}

// RenderPs writes rows for people.
func RenderPs(w io.Writer, rows []hostio.PsRow) {
	fmt.Fprintf(w, "%-24s %-20s %-13s %7s  %s\n", "RUN", "JOB", "STATE", "ATTEMPT", "HOSTS")
	for _, r := range rows {
		fmt.Fprintf(w, "%-24s %-20s %-13s %7d  %s\n", r.RunID, r.Job, r.State, r.Attempt, strings.Join(r.Hosts, ","))
	}
}
