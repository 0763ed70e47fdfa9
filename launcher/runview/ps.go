package runview

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
)

// HostRuns are the live detached runs found in the indexes of the hosts in
// the inventory (or job) file, whoever started them.
func HostRuns(ctx context.Context, inventory string, dial cluster.DialOptions, agentBinary string) ([]hostio.PsRow, error) {
	cfg, err := config.Load(inventory, config.LoadOptions{HostsOnly: true})
	if err != nil {
		return nil, err
	}
	dial.Inventory = config.Endpoints(cfg.Hosts)
	agents := remote.FindAgents(agentBinary)
	byRun := map[string]*hostio.PsRow{}
	var errs []string
	for _, h := range cfg.Hosts {
		reps, err := indexOf(ctx, h, dial, agents)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, p := range reps.Processes {
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
	if len(errs) > 0 {
		return rows, fmt.Errorf("%s", strings.Join(errs, "; "))
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
