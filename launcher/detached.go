package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
)

// A detached run (RunOptions.Detach, `drover run -d`) keeps its state on
// the hosts, where any drover can find it (see agent/detach.go for the
// agents' side): each host's workdir has .drover/runs/<id>/ with the run's
// record (agent.RunRecord, written here at every change of state) and one
// state record and log per process and attempt, and .drover/runs/current
// names the newest run. The agents keep the group running while no
// supervisor is attached, for controller_timeout (default: for ever).

// NewRunID is a fresh run id: the start time and a random suffix, so that
// ids sort by age and two machines never pick the same one.
func NewRunID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// detachState is the runner's part of a detached run.
type detachState struct {
	runID     string
	runLogDir string
	// adopting is the earlier run this one takes over (nil: none), and
	// firstAttempt the number of this run's first attempt (the adopted
	// one's, else 1).
	adopting     *adoption
	firstAttempt int
	// lookFirst makes a foreground run's first attempt look for a group
	// to adopt beside its setup (lookForGroup).
	lookFirst bool
	// detachedGroup says the group runs under detached agents (see
	// agent/detach.go): a detached run's, or the one a foreground run
	// adopted (see adopt.go). Its processes are then attached to, and the
	// run's record is kept on the hosts.
	detachedGroup bool
	readyOnce     sync.Once
	// abort is closed when `drover stop --abort` asked for the group to
	// be killed at once.
	abort     chan struct{}
	abortOnce sync.Once
	// conns are the newest attempt's connections, over which the record
	// is written.
	connMu  sync.Mutex
	conns   []*hostConn
	runRec  agent.RunRecord
	started time.Time
}

// processFiles are p's state record and log on its host (absolute).
func (a *attempt) processFiles(c *attemptHost, name string) (state, log string) {
	st, lg := agent.ProcessFiles(a.r.runID, a.n, name)
	wd := remoteAbs(c.home, c.host.Workdir)
	return path.Join(wd, st), path.Join(wd, lg)
}

// setRecord updates the run's record and writes it to every host of
// conns (those of the newest attempt when conns is nil), with the link
// to the newest run. Failures are events: the run goes on without them.
func (r *runner) setRecord(conns []*hostConn, update func(rec *agent.RunRecord)) {
	if !r.detachedGroup {
		return
	}
	r.connMu.Lock()
	if conns != nil {
		r.conns = conns
	}
	conns = r.conns
	update(&r.runRec)
	r.runRec.Updated = r.now().UTC()
	hosts := make([]string, len(conns))
	for i, c := range conns {
		hosts[i] = c.host.Name
	}
	r.runRec.Hosts = hosts
	data, err := json.MarshalIndent(r.runRec, "", "  ")
	// One newline, added here: the hosts' writes share data.
	data = append(data, '\n')
	rec := r.runRec
	r.connMu.Unlock()
	hostio.NoteLocally(r.opts.JobPath, rec)
	if err != nil {
		r.events.printf("warning: record run %s: %v", r.runID, err)
		return
	}
	_ = forEach(conns, func(c *hostConn) error {
		if c.fs == nil {
			return nil
		}
		wd := remoteAbs(c.home, c.host.Workdir)
		if err := writeRecord(c, wd, r.runID, data); err != nil {
			r.events.printf("warning: record run %s on %s: %v", r.runID, c.host.Name, err)
		}
		return nil
	})
}

// writeRecord writes data (JSON and a newline) as run id's record in workdir wd over c, and
// points the newest-run link at it.
func writeRecord(c *hostConn, wd, id string, data []byte) error {
	return hostio.WriteRecord(c.fs, wd, id, data)
}

// newestCheckpoint names the newest checkpoint in the run's record ("" for
// none, or before the record is loaded).
func (r *runner) newestCheckpoint() string {
	rec, err := r.checkpointRecord(r.runRec.Job)
	if err != nil || rec == nil {
		return ""
	}
	e := rec.Entries()
	if len(e) == 0 {
		return ""
	}
	return e[len(e)-1].Name
}

// noteCheckpoint writes the run record again when a newer checkpoint was
// recorded since it was last written, so that status shows it.
func (r *runner) noteCheckpoint() {
	name := r.newestCheckpoint()
	r.connMu.Lock()
	changed := name != "" && name != r.runRec.Checkpoint && r.conns != nil
	r.connMu.Unlock()
	if changed {
		r.setRecord(nil, func(rec *agent.RunRecord) { rec.Checkpoint = name })
	}
}

// readyPoll bounds how long a detached run's first attempt may take to
// have every process recorded as running before `drover run -d` is told
// it is, and how often the records are read meanwhile.
const (
	readyWait = 60 * time.Second
	readyPoll = 200 * time.Millisecond
)

// announceRunning records the attempt as running and, on the first
// attempt that got every process running, tells the caller (Ready).
func (s *supervisor) announceRunning(conns []*attemptHost) {
	a := s.a
	a.r.setRecord(hostConns(conns), func(rec *agent.RunRecord) {
		rec.State, rec.Attempt, rec.Restarts, rec.Checkpoint = "running", a.n, a.restarts, a.r.newestCheckpoint()
	})
	if a.r.opts.Ready == nil {
		return
	}
	procs := append([]*running(nil), s.procs...)
	go func() {
		deadline := a.r.now().Add(readyWait)
		for a.r.now().Before(deadline) {
			if s.allRunning(procs) {
				a.r.readyOnce.Do(func() { a.r.opts.Ready(a.r.runID, a.r.runLogDir) })
				return
			}
			time.Sleep(readyPoll)
		}
	}()
}

// allRunning reports whether every process's agent recorded it as
// started (running, or already ended).
func (s *supervisor) allRunning(procs []*running) bool {
	for _, rp := range procs {
		c := s.byHost[rp.p.Host.Name]
		st, _ := s.a.processFiles(c, rp.p.Name())
		rc, err := c.fs.Open(st)
		if err != nil {
			return false
		}
		var rec agent.State
		err = json.NewDecoder(rc).Decode(&rec)
		rc.Close()
		if err != nil || rec.State == agent.StateStarting {
			return false
		}
	}
	return true
}

// stopPoll is how often a detached run's supervisor looks for a stop that
// `drover stop` asked for.
const stopPoll = time.Second

// watchStopRequest ends ctx (cancel) once `drover stop` wrote the run's
// stop file on one of the hosts; --abort also closes r.abort.
func (r *runner) watchStopRequest(ctx context.Context, cancel context.CancelCauseFunc) {
	if !r.detachedGroup {
		return
	}
	go func() {
		for {
			if err := sleepCtx(ctx, stopPoll); err != nil {
				return
			}
			r.noteCheckpoint()
			r.shareCheckpoints()
			r.connMu.Lock()
			conns := r.conns
			r.connMu.Unlock()
			for _, c := range conns {
				if c.fs == nil {
					continue
				}
				b, err := readSmall(c.fs, path.Join(remoteAbs(c.home, c.host.Workdir), agent.RunDir(r.runID), agent.StopFile), 4096)
				if err != nil {
					continue
				}
				what := string(b)
				if strings.TrimSpace(what) == "abort" {
					r.abortOnce.Do(func() { close(r.abort) })
				}
				r.events.printf("drover stop asked for the run to stop (%s)", strings.TrimSpace(what))
				cancel(errStopRequested)
				return
			}
		}
	}()
}

// errStopRequested is why a detached run ended on `drover stop`.
var errStopRequested = errors.New("stopped by drover stop")

// finalState is the run record's state for how the run ended.
func finalState(o Outcome) string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Interrupted:
		return "stopped"
	}
	return "failed"
}

// supervisorHost is this machine's name for the run record.
func supervisorHost() string {
	h, _ := os.Hostname()
	return h
}

// describeRun says, for `drover run -d`, how to follow and stop run id.
func DescribeDetached(id, job string) string {
	return fmt.Sprintf("run %s started in the background\n  follow: drover logs %s --follow\n  status: drover status %s\n  stop:   drover stop %s", id, job, job, job)
}
