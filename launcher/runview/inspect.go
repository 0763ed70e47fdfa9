package runview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/user"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/agent/remote"
	"github.com/droverhq/drover/launcher/hostio"
)

// InspectOptions say which job `drover status`, `stop` and `logs` look at:
// they read the hosts, never the local runs/, so they work from any
// machine with the job file and SSH access.
type InspectOptions struct {
	JobPath       string
	InventoryPath string
	Dial          cluster.DialOptions
	// AgentBinary is the running drover binary (see RunOptions).
	AgentBinary string
	// HostWait bounds the look at each host (dial, login, the agent's
	// answer), and each later question to it; 0: hostio.DefaultHostWait.
	// A host past it is unreachable, and the others are read all the same.
	HostWait time.Duration
	// Adjust, when set, changes the job as read before its hosts are
	// (a sweep's trial: launcher.RunOptions.Adjust).
	Adjust func(*config.Config) error
}

// inspect connects to every host of the job (spares too: they may stand
// in for one) and reads what each knows of the workdir's newest run.
// files opens file access on every host too (stop and logs need it;
// status, which must answer fast, does not).
func inspect(ctx context.Context, o InspectOptions, files bool) (*config.Config, []*hostio.View, func(), error) {
	cfg, err := config.Load(o.JobPath, config.LoadOptions{InventoryPath: o.InventoryPath})
	if err != nil {
		return nil, nil, nil, err
	}
	if o.Adjust != nil {
		if err := o.Adjust(cfg); err != nil {
			return nil, nil, nil, err
		}
	}
	dial := o.Dial
	dial.Inventory = config.Endpoints(cfg.Hosts)
	views := hostio.ReadViews(ctx, cfg.Hosts, dial, remote.FindAgents(o.AgentBinary), files, o.HostWait)
	return cfg, views, func() { hostio.CloseViews(views) }, nil
}

// followAgreed agrees on the workdir's run (hostio.Agree) and asks each
// host that reported another for the agreed run by its id: its record
// there is not followed, but its processes of the run are the run's (a
// host whose `current` was rewritten still runs its rank). It returns
// the agreement as first read, dissent included.
func followAgreed(ctx context.Context, views []*hostio.View, wait time.Duration) hostio.Agreement {
	ag := hostio.Agree(views)
	if ag.Run == nil {
		return ag
	}
	var wg sync.WaitGroup
	for _, v := range views {
		if v.Err != nil || v.Report.Run == nil || v.Report.Run.RunID == ag.Run.RunID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, hostWait(wait))
			defer cancel()
			if rep, err := v.Agent().Runs(hctx, v.Workdir, ag.Run.RunID); err == nil && rep.Run != nil && rep.Run.RunID == ag.Run.RunID {
				v.Report = rep
			}
		}()
	}
	wg.Wait()
	return ag
}

// hostWait is wait, or hostio.DefaultHostWait when 0.
func hostWait(wait time.Duration) time.Duration {
	if wait <= 0 {
		return hostio.DefaultHostWait
	}
	return wait
}

// RunStatus is `drover status --json`; its keys are a stable interface.
type RunStatus struct {
	State      agent.RunState   `json:"state"`
	RunID      string           `json:"run_id"`
	Attempt    int              `json:"attempt"`
	Restarts   int              `json:"restarts"`
	Checkpoint string           `json:"checkpoint"`
	Supervisor SupervisorStatus `json:"supervisor"`
	Processes  []ProcessStatus  `json:"processes"`
	// Dissent are the hosts whose report names another run than the one
	// the hosts agree on (not followed), Unreachable those not read.
	Dissent     []string `json:"dissent,omitempty"`
	Unreachable []string `json:"unreachable,omitempty"`
	// Foreground says a foreground `drover run` supervises the run (its
	// group stops with it), not a detached one.
	Foreground bool `json:"foreground,omitempty"`

	// Stragglers name the ranks the running attempt's straggler watch
	// holds far slower than their peers (its events' lines).
	Stragglers []string `json:"stragglers,omitempty"`
	// Queue says, for a queued run, where it waits on each host and who
	// holds the GPUs; Reason why a run that never started ended (its
	// --queue-timeout).
	Queue  []string `json:"queue,omitempty"`
	Reason string   `json:"reason,omitempty"`
}

// SupervisorStatus is the run's supervisor as the hosts see it.
type SupervisorStatus struct {
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	Alive bool   `json:"alive"`
}

// ProcessStatus is one process of the run's current attempt.
type ProcessStatus struct {
	Name           string          `json:"name"`
	Rank           int             `json:"rank"`
	Host           string          `json:"host"`
	PID            int             `json:"pid"`
	State          agent.ProcState `json:"state"`
	Exit           *int            `json:"exit"`
	LastOutputAgeS float64         `json:"last_output_age_s"`
}

// ErrNoRun is a job that has no run on any reachable host.
var ErrNoRun = errors.New("no run of this job found on its hosts")

// Status reads the job's newest run, detached or foreground, from its
// hosts. It changes nothing on them.
func Status(ctx context.Context, o InspectOptions) (*RunStatus, error) {
	_, views, closeAll, err := inspect(ctx, o, false)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	ag := followAgreed(ctx, views, o.HostWait)
	st, err := summarize(views)
	if err != nil {
		return nil, err
	}
	for _, d := range ag.Dissent {
		st.Dissent = append(st.Dissent, d.String())
	}
	return st, nil
}

// summarize folds the hosts' reports into the status of the run they
// agree on (hostio.Agree); a host that could not be read is an error only
// when no run is agreed on.
func summarize(views []*hostio.View) (*RunStatus, error) {
	ag := hostio.Agree(views)
	rec := ag.Run
	if err := ag.Err(); err != nil {
		return nil, err
	}
	if rec == nil {
		if len(ag.Unreachable) > 0 {
			return nil, errors.Join(ag.Unreachable...)
		}
		return nil, ErrNoRun
	}
	st := &RunStatus{State: rec.State, RunID: rec.RunID, Attempt: rec.Attempt, Restarts: rec.Restarts, Checkpoint: rec.Checkpoint,
		Supervisor: SupervisorStatus{Host: rec.SupervisorHost, PID: rec.SupervisorPid}, Processes: []ProcessStatus{}, Foreground: rec.Foreground}
	if rec.StragglersAttempt == rec.Attempt {
		st.Stragglers = rec.Stragglers
	}
	st.Queue, st.Reason = queueLines(rec), rec.Reason
	for _, v := range views {
		if v.Err != nil {
			st.Unreachable = append(st.Unreachable, v.Host.Name)
		}
		if v.Err != nil || v.Report.Run == nil || v.Report.Run.RunID != rec.RunID {
			continue
		}
		if hostio.LeaseNames(v.Report, rec) {
			st.Supervisor.Alive = true
		}
		for _, p := range v.Report.Processes {
			st.Processes = append(st.Processes, processStatus(v.Host.Name, p))
		}
	}
	sort.Slice(st.Processes, func(i, j int) bool { return st.Processes[i].Rank < st.Processes[j].Rank })
	st.State = seenState(st.State, st.Supervisor.Alive, rec.Foreground)

	return st, nil
}

// seenState is a run's state as the views show it: a record that is not
// final with its supervisor gone is unsupervised (a detached run's group
// runs on) or lost (a foreground run's agents stop its group; a queued
// run has no group, and its place in the queues went with its
// supervisor).
func seenState(recorded agent.RunState, supervised, foreground bool) agent.RunState {
	switch {
	case recorded.Final() || supervised:
		return recorded
	case foreground || recorded == agent.RunQueued:
		return agent.RunLost
	}
	return agent.RunUnsupervised
}

// queueLines are a queued run's places in its hosts' queues, by host.
func queueLines(rec *agent.RunRecord) []string {
	if rec.State != agent.RunQueued {
		return nil
	}
	var out []string
	for _, h := range slices.Sorted(maps.Keys(rec.Queue)) {
		out = append(out, rec.Queue[h])
	}
	return out
}

// processStatus is p's row: running only while its agent runs.
func processStatus(host string, p agent.ProcReport) ProcessStatus {
	ps := ProcessStatus{Name: p.Name, Rank: p.Rank, Host: host, PID: p.Pid, State: agent.ProcRunning, Exit: p.Exit,
		LastOutputAgeS: float64(int64(p.LastOutputAgeS*10)) / 10}
	switch {
	case p.State.State == agent.ProcStopped:
		ps.State = agent.ProcStopped
	case p.Final() || !p.Alive:
		ps.State = agent.ProcExited
	}
	return ps
}

// RenderStatus writes st for people.
func RenderStatus(w io.Writer, st *RunStatus) {
	alive := "gone"
	if st.Supervisor.Alive {
		alive = "alive"
	}
	if st.Foreground {
		alive += ", foreground drover run"
	}
	fmt.Fprintf(w, "run %s: %s, attempt %d, %d restart(s)\n", st.RunID, st.State, st.Attempt, st.Restarts)
	fmt.Fprintf(w, "supervisor: %s pid %d (%s)\n", st.Supervisor.Host, st.Supervisor.PID, alive)
	if st.Checkpoint != "" {
		fmt.Fprintf(w, "checkpoint: %s\n", st.Checkpoint)
	}
	lines := append(append([]string(nil), st.Queue...), st.Stragglers...)
	if st.Reason != "" {
		lines = append(lines, "ended: "+st.Reason)
	}
	for _, s := range lines {
		// A host's record is evidence: no control character of it
		// reaches the terminal.
		if strings.IndexFunc(s, unicode.IsControl) >= 0 {
			s = strconv.Quote(s)
		}
		fmt.Fprintf(w, "%s\n", s)
	}
	for _, d := range st.Dissent {
		fmt.Fprintf(w, "not followed: %s\n", d)
	}
	if len(st.Unreachable) > 0 {
		fmt.Fprintf(w, "unreachable: %s\n", strings.Join(st.Unreachable, ", "))
	}
	fmt.Fprintf(w, "%-12s %4s  %-16s %8s  %-8s %4s  %s\n", "PROCESS", "RANK", "HOST", "PID", "STATE", "EXIT", "LAST OUTPUT")
	for _, p := range st.Processes {
		exit := "-"
		if p.Exit != nil {
			exit = fmt.Sprint(*p.Exit)
		}
		fmt.Fprintf(w, "%-12s %4d  %-16s %8d  %-8s %4s  %.1fs ago\n", p.Name, p.Rank, p.Host, p.PID, p.State, exit, p.LastOutputAgeS)
	}
}

// stopWaitPoll is how often `drover stop` reads the hosts while it waits.
const stopWaitPoll = 500 * time.Millisecond

// Stop stops the job's run (the one its hosts agree on), detached or
// foreground, from any machine: it asks the supervisor (a stop file in the
// run's directory on every host, with who asks: Requester; a foreground
// drover ends as on Ctrl-C and says who stopped it), and stops through the
// agents what is still running when the supervisor is gone or does not act
// within stop_grace. It returns nil once no process of the run is left on
// any host; a host it could not reach or ask is an error naming it
// (*StopError), after every other host was stopped.
func Stop(ctx context.Context, o InspectOptions, abort bool, events io.Writer) error {
	cfg, views, closeAll, err := inspect(ctx, o, true)
	if err != nil {
		return err
	}
	defer closeAll()
	ag := followAgreed(ctx, views, o.HostWait)
	st, err := summarize(views)
	if err != nil {
		return err
	}
	for _, d := range ag.Dissent {
		fmt.Fprintf(events, "%s, not the run the other hosts agree on (%s): not followed\n", d, st.RunID)
	}
	by := Requester()
	for _, v := range of(views, st.RunID) {
		_ = hostio.WriteStopRequest(v.FS, v.Workdir, st.RunID, abort, by)
	}
	wait := hostWait(o.HostWait)
	if st.Supervisor.Alive {
		kind := ""
		if st.Foreground {
			kind = "foreground "
		}
		fmt.Fprintf(events, "asked the %ssupervisor (%s pid %d) to stop run %s\n", kind, st.Supervisor.Host, st.Supervisor.PID, st.RunID)
		limit := cfg.Job.StopGrace + 5*time.Second
		if cfg.Job.Container.Set() {
			limit += agent.ContainerStopSlack // the supervisor's wait (launcher's requestStop)
		}
		if abort {
			limit = 10 * time.Second
		}
		if left, unanswered := waitGone(ctx, views, st.RunID, limit, wait); left == 0 &&
			(st.State != agent.RunQueued || waitEnded(ctx, views, st.RunID, limit, wait)) {
			return stopError(views, st.RunID, 0, unanswered)
		}
	}
	fmt.Fprintf(events, "stopping run %s through its agents\n", st.RunID)
	stopThroughAgents(ctx, views, st.RunID, cfg.Job.StopGrace, abort)
	left, unanswered := waitGone(ctx, views, st.RunID, cfg.Job.StopGrace+10*time.Second, wait)
	if left == 0 {
		markStopped(views, st.RunID)
	}
	if err := stopError(views, st.RunID, left, unanswered); err != nil {
		return err
	}
	hostio.MarkLocally(st.RunID, agent.RunStopped)
	return ctx.Err()
}

// StopError is a stop that left processes of the run running, or hosts
// drover could not reach or ask: they may run the run's processes still.
type StopError struct {
	RunID string
	Left  int      // processes seen alive at the end
	Hosts []string // hosts unreached or unanswering, with why
}

func (e *StopError) Error() string {
	msg := fmt.Sprintf("stop run %s: %d process(es) still running", e.RunID, e.Left)
	if e.Left == 0 {
		msg = fmt.Sprintf("stop run %s: stopped on every host drover reached", e.RunID)
	}
	if len(e.Hosts) > 0 {
		msg += fmt.Sprintf("; not reached: %s; its processes may still run: run `drover stop` again once it answers", strings.Join(e.Hosts, "; "))
	}
	return msg
}

// stopError is nil when no process of run id was left and every host
// was read and answered, else a *StopError saying which were not.
func stopError(views []*hostio.View, id string, left int, unanswered []string) error {
	var hosts []string
	for _, v := range views {
		if v.Err != nil {
			hosts = append(hosts, v.Err.Error())
		}
	}
	hosts = append(hosts, unanswered...)
	if left == 0 && len(hosts) == 0 {
		return nil
	}
	return &StopError{RunID: id, Left: left, Hosts: hosts}
}

// of are the views whose report is of run id.
func of(views []*hostio.View, id string) []*hostio.View {
	var out []*hostio.View
	for _, v := range views {
		if v.Err == nil && v.Report.Run != nil && v.Report.Run.RunID == id {
			out = append(out, v)
		}
	}
	return out
}

// waitGone waits up to limit until no process of run id is alive on any
// host, and returns how many are left and the hosts that did not answer
// (each asked within wait) at the last look.
func waitGone(ctx context.Context, views []*hostio.View, id string, limit, wait time.Duration) (left int, unanswered []string) {
	deadline := time.Now().Add(limit)
	for {
		left, unanswered = 0, nil
		for _, v := range of(views, id) {
			hctx, cancel := context.WithTimeout(ctx, wait)
			rep, err := v.Agent().Runs(hctx, v.Workdir, id)
			cancel()
			if err != nil {
				unanswered = append(unanswered, fmt.Sprintf("%s: %v", v.Host.Name, err))
				continue
			}
			v.Report = rep
			for _, p := range rep.Processes {
				if p.Alive {
					left++
				}
			}
		}
		if left == 0 && len(unanswered) == 0 || time.Now().After(deadline) || hostio.Sleep(ctx, stopWaitPoll) != nil {
			return left, unanswered
		}
	}
}

// waitEnded waits up to limit until every host's record of run id is
// final: a queued run has no process to wait for, and its supervisor
// records its end once it left every host's queue.
func waitEnded(ctx context.Context, views []*hostio.View, id string, limit, wait time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		ended := true
		for _, v := range of(views, id) {
			hctx, cancel := context.WithTimeout(ctx, wait)
			rep, err := v.Agent().Runs(hctx, v.Workdir, id)
			cancel()
			if err != nil || rep.Run == nil || !rep.Run.State.Final() {
				ended = false
				continue
			}
			v.Report = rep
		}
		if ended {
			return true
		}
		if time.Now().After(deadline) || hostio.Sleep(ctx, stopWaitPoll) != nil {
			return false
		}
	}
}

// stopThroughAgents stops every live process of run id with `drover agent
// stop` on its host (SIGTERM, SIGKILL after grace; abort: SIGKILL now).
func stopThroughAgents(ctx context.Context, views []*hostio.View, id string, grace time.Duration, abort bool) {
	var wg sync.WaitGroup
	for _, v := range views {
		if v.Err != nil || v.Report.Run == nil || v.Report.Run.RunID != id {
			continue
		}
		for _, p := range v.Report.Processes {
			if !p.Alive {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = remote.Client{T: v.T, Path: v.AgentPath}.Stop(ctx, path.Join(v.Workdir, hostio.PidDir, p.Name+".pid"), grace, abort, io.Discard)
			}()
		}
	}
	wg.Wait()
}

// markStopped records run id as stopped on the hosts whose record still
// says otherwise (its supervisor was gone).
func markStopped(views []*hostio.View, id string) {
	for _, v := range views {
		if v.Err != nil || v.Report.Run == nil || v.Report.Run.RunID != id || v.Report.Run.State.Final() {
			continue
		}
		rec := *v.Report.Run
		rec.State, rec.Updated = agent.RunStopped, time.Now().UTC()
		data, _ := json.MarshalIndent(rec, "", "  ")
		data = append(data, '\n')
		_ = hostio.WriteRecord(v.FS, v.Workdir, id, data)
	}
}

// Requester names who runs this `drover stop`, for the stopped run's
// terminal: user@host, and the address of the SSH client this session
// came from when there is one ("alice@laptop", "bob@login-1 (ssh from
// 10.0.0.7)").
func Requester() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	} else if n := os.Getenv("USER"); n != "" {
		name = n
	}
	host, _ := os.Hostname()
	who := name + "@" + host
	if f := strings.Fields(os.Getenv("SSH_CONNECTION")); len(f) > 0 {
		who += " (ssh from " + f[0] + ")"
	}
	return who
}
