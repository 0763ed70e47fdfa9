package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// localRunsDir is where this machine keeps one file per detached run it
// started or adopted (PsRow), under the user's home, for `drover ps`.
const localRunsDir = ".drover/supervised"

// PsRow is one run in `drover ps`; --json prints these.
type PsRow struct {
	RunID   string   `json:"run_id"`
	Job     string   `json:"job"`
	State   string   `json:"state"`
	Attempt int      `json:"attempt"`
	Hosts   []string `json:"hosts"`
	// JobFile and Supervisor are known for runs this machine supervised.
	JobFile    string    `json:"job_file,omitempty"`
	Supervisor int       `json:"supervisor_pid,omitempty"`
	Updated    time.Time `json:"updated"`
}

// noteLocally records rec in this machine's list of supervised runs.
func (r *runner) noteLocally(rec agent.RunRecord) {
	home, err := os.UserHomeDir()
	if err != nil {
		return
	}
	abs, _ := filepath.Abs(r.opts.JobPath)
	row := PsRow{RunID: rec.RunID, Job: rec.Job, State: rec.State, Attempt: rec.Attempt, Hosts: rec.Hosts,
		JobFile: abs, Supervisor: rec.SupervisorPid, Updated: rec.Updated}
	data, _ := json.MarshalIndent(row, "", "  ")
	dir := filepath.Join(home, localRunsDir)
	if os.MkdirAll(dir, 0o700) != nil {
		return
	}
	tmp := filepath.Join(dir, "."+rec.RunID+".tmp")
	if os.WriteFile(tmp, append(data, '\n'), 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, rec.RunID+".json"))
	}
}

// LocalRuns are the detached runs this machine started or adopted, newest
// first; one whose supervisor is gone and that is not over reads as
// unsupervised (as far as this machine knows: `drover status` asks the
// hosts).
func LocalRuns() ([]PsRow, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("find the home directory: %w", err)
	}
	files, _ := filepath.Glob(filepath.Join(home, localRunsDir, "*.json"))
	rows := []PsRow{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		var row PsRow
		if err != nil || json.Unmarshal(b, &row) != nil {
			continue
		}
		if !isFinal(row.State) && (row.Supervisor <= 0 || syscall.Kill(row.Supervisor, 0) != nil) {
			row.State = "unsupervised"
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Updated.After(rows[j].Updated) })
	return rows, nil
}

// HostRuns are the live detached runs found in the indexes of the hosts in
// the inventory (or job) file, whoever started them.
func HostRuns(ctx context.Context, inventory string, dial cluster.DialOptions, agentBinary string) ([]PsRow, error) {
	cfg, err := config.Load(inventory, config.LoadOptions{HostsOnly: true})
	if err != nil {
		return nil, err
	}
	dial.Inventory = config.Endpoints(cfg.Hosts)
	agents := remote.FindAgents(agentBinary)
	byRun := map[string]*PsRow{}
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
				row = &PsRow{RunID: p.RunID, Job: p.Job, State: "running", Attempt: p.Attempt}
				byRun[p.RunID] = row
			}
			row.Attempt = max(row.Attempt, p.Attempt)
			if len(row.Hosts) == 0 || row.Hosts[len(row.Hosts)-1] != h.Name {
				row.Hosts = append(row.Hosts, h.Name)
			}
		}
	}
	rows := []PsRow{}
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
	v := &hostView{host: h}
	if v.t, v.err = cluster.Dial(ctx, h.Endpoint(), dial); v.err != nil {
		return nil, v.err
	}
	defer v.t.Close()
	if v.agent, v.err = remote.Install(ctx, v.t, agents); v.err != nil {
		return nil, v.err
	}
	return v.runs(ctx)
}

// RenderPs writes rows for people.
func RenderPs(w io.Writer, rows []PsRow) {
	fmt.Fprintf(w, "%-24s %-20s %-13s %7s  %s\n", "RUN", "JOB", "STATE", "ATTEMPT", "HOSTS")
	for _, r := range rows {
		fmt.Fprintf(w, "%-24s %-20s %-13s %7d  %s\n", r.RunID, r.Job, r.State, r.Attempt, strings.Join(r.Hosts, ","))
	}
}
