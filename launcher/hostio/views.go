package hostio

import (
	"context"
	"fmt"
	"path"
	"sync"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
)

// View is one host of a job as `drover agent runs` reported its workdir's
// newest run: what `drover status`, `stop` and `logs` read, and what a
// run that looks for a group to adopt reads.
type View struct {
	Conn
	Workdir string // absolute with file access, else as the inventory says
	Report  *agent.HostReport
	Err     error // the host could not be read
}

// ReadViews reads every host's report of its workdir's newest run (with
// file access on each when files), all at once. The caller closes them
// (CloseViews).
func ReadViews(ctx context.Context, hosts []config.Host, dial cluster.DialOptions, agents remote.Agents, files bool) []*View {
	views := make([]*View, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		views[i] = &View{Conn: Conn{Host: h}}
		wg.Add(1)
		go func() { defer wg.Done(); views[i].read(ctx, dial, agents, files) }()
	}
	wg.Wait()
	return views
}

// CloseViews closes the views' connections.
func CloseViews(views []*View) {
	for _, v := range views {
		if v.T != nil {
			v.T.Close()
		}
	}
}

// read connects to v's host and asks its agent for the newest run; with
// files it opens file access too. Without, the workdir stays as the
// inventory says (the agent runs in the home, where a relative one is).
func (v *View) read(ctx context.Context, dial cluster.DialOptions, agents remote.Agents, files bool) {
	v.T, v.Err = cluster.Dial(ctx, v.Host.Endpoint(), dial)
	if v.Err != nil {
		return
	}
	v.Workdir = v.Host.Workdir
	if files {
		if v.FS, v.Err = v.T.FS(ctx); v.Err != nil {
			return
		}
		if v.Home, v.Err = v.FS.Home(); v.Err != nil {
			return
		}
		v.Workdir = Abs(v.Home, v.Host.Workdir)
	}
	if v.AgentPath, v.Err = remote.Install(ctx, v.T, agents); v.Err != nil {
		return
	}
	v.Report, v.Err = v.Runs(ctx)
}

// Runs runs `drover agent runs` for v's workdir (its host's index when
// v.Workdir is "").
func (v *View) Runs(ctx context.Context) (*agent.HostReport, error) {
	rep, err := v.Agent().Runs(ctx, v.Workdir, "")
	if err != nil {
		return nil, fmt.Errorf("read runs of %s on %s: %w", v.Workdir, Label(v.Host), err)
	}
	return rep, nil
}

// NewestRecord is the run record most lately updated on any host, and the
// hosts that could not be read.
func NewestRecord(views []*View) (*agent.RunRecord, []error) {
	var rec *agent.RunRecord
	var errs []error
	for _, v := range views {
		if v.Err != nil {
			errs = append(errs, v.Err)
			continue
		}
		if r := v.Report.Run; r != nil && (rec == nil || r.Updated.After(rec.Updated)) {
			rec = r
		}
	}
	return rec, errs
}

// PidDir is where, in a workdir, the agents keep a pidfile per process
// (`drover agent stop --pidfile`).
const PidDir = ".drover/pids"

// ForegroundLog is, relative to the workdir, where a foreground run's
// agent keeps the whole log of process name in attempt n (a detached
// run's is agent.ProcessFiles's, in the run's directory).
func ForegroundLog(n int, name string) string {
	return fmt.Sprintf(".drover/logs/attempt-%d/%s.log", n, name)
}

// ProcessLog is, in workdir wd, the log of process st of run id's attempt
// n: where the state record says, when that is one of the two places a
// run's agent writes it (a foreground or a detached run's), else the
// detached run's. A host's record never points drover elsewhere.
func ProcessLog(wd, id string, n int, st *agent.State) string {
	_, detached := agent.ProcessFiles(id, n, st.Name)
	if fg := path.Join(wd, ForegroundLog(n, st.Name)); path.Clean(st.Log) == fg {
		return fg
	}
	return path.Join(wd, detached)
}
