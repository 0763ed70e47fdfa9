package hostio

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

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

// DefaultHostWait bounds ReadViews' look at one host when its caller
// sets no bound: dial, login, the agent's check (and, on first contact,
// its upload) and its answer.
const DefaultHostWait = 30 * time.Second

// ReadViews reads every host's report of its workdir's newest run (with
// file access on each when files), all at once, each within wait
// (DefaultHostWait when 0): a host whose login hangs (a .bashrc that
// sleeps, a hung home directory) is an *UnreachableError past it, and the
// others are read all the same. The caller closes them (CloseViews).
func ReadViews(ctx context.Context, hosts []config.Host, dial cluster.DialOptions, agents remote.Agents, files bool, wait time.Duration) []*View {
	if wait <= 0 {
		wait = DefaultHostWait
	}
	views := make([]*View, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		views[i] = &View{Conn: Conn{Host: h}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			views[i].read(hctx, dial, agents, files)
			if views[i].Err != nil && hctx.Err() != nil && ctx.Err() == nil {
				views[i].Err = &UnreachableError{Host: h.Name, Address: h.Address, After: wait, Err: views[i].Err}
			}
			if views[i].Err != nil && views[i].T != nil {
				views[i].T.Close()
				views[i].T = nil
			}
		}()
	}
	wg.Wait()
	return views
}

// UnreachableError is a host that did not answer within the bound of a
// look at it: drover goes on with the others and names it.
type UnreachableError struct {
	Host, Address string
	After         time.Duration
	Err           error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("%s (%s) did not answer within %s (dial, login and `drover agent runs`): counted as unreachable; "+
		"a login shell or home directory that hangs, or a host cut off, look like this (try `ssh %s true`); %v",
		e.Host, e.Address, e.After, e.Address, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

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
