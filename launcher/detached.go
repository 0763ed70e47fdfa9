package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/hostio"
)

// Every run keeps its state on the hosts, where any drover can find it
// (see agent/detach.go for the agents' side): each host's workdir has
// .drover/runs/<id>/ with the run's record (agent.RunRecord, written here
// at every change of state) and one state record per process and attempt,
// and .drover/runs/current names the newest run. So `drover status`,
// `logs`, `stop` and `ps` see a foreground run as they see a detached one
// (RunOptions.Detach, `drover run -d`). A detached run's agents keep the
// group running while no supervisor is attached, for controller_timeout
// (default: for ever), and keep its logs there too; a foreground run's
// stop with it (agent.RunRecord.Foreground) and keep their logs in
// .drover/logs/.

// recordWait bounds how long a foreground run waits for its final
// record to be written to the hosts: a host lost at the end must not
// hold up the exit.
const recordWait = 5 * time.Second

// setRecord updates the run's record and writes it to every host of
// conns (those of the newest attempt when conns is nil), with the link
// to the newest run. Failures are events: the run goes on without them.
// A detached run waits for the writes; a foreground one does not (it
// waits at most recordWait for the final record), so that a host that no
// longer answers never delays a restart.
func (r *runner) setRecord(conns []*hostConn, update func(rec *agent.RunRecord)) {
	r.connMu.Lock()
	if conns != nil {
		r.conns = conns
	}
	conns = r.conns
	if len(conns) == 0 && !r.detachedGroup {
		// A foreground run that never reached a host has nothing to
		// show anywhere else: its terminal said why.
		r.connMu.Unlock()
		return
	}
	update(&r.runRec)
	if r.runRec.State != agent.RunQueued {
		r.runRec.Queue = nil
	}
	r.runRec.Updated = r.now().UTC()
	detached := r.detachedGroup
	r.runRec.Foreground = !detached
	targets := r.recordTargets(conns)
	hosts := make([]string, len(targets))
	for i, t := range targets {
		hosts[i] = t.name
	}
	r.runRec.Hosts = hosts
	data, err := json.MarshalIndent(r.runRec, "", "  ")
	// One newline, added here: the hosts' writes share data.
	data = append(data, '\n')
	rec := r.runRec
	r.recSeq++
	seq := r.recSeq
	r.connMu.Unlock()
	hostio.NoteLocally(r.opts.JobPath, rec)
	if err != nil {
		r.events.printf("warning: record run %s: %v", r.runID, err)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = forEach(targets, func(t recordTarget) error {
			r.writeRecordOn(t, seq, data, detached)
			return nil
		})
	}()
	switch {
	case detached:
		<-done
	case rec.State.Final():
		select {
		case <-done:
		case <-time.After(recordWait):
		}
	}
}

// recordTarget is one host's workdir as the run's record, stop request
// and shared checkpoint record reach it, read once under the pool's lock:
// a restart that reuses a connection updates its host entry
// (connPool.reuse) while these writes and reads may still run.
type recordTarget struct {
	name, wd string
	fs       cluster.FS
}

// recordTargets are conns' workdirs, those with file access.
func (r *runner) recordTargets(conns []*hostConn) []recordTarget {
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	out := make([]recordTarget, 0, len(conns))
	for _, c := range conns {
		if c.fs != nil {
			out = append(out, recordTarget{name: c.host.Name, wd: remoteAbs(c.home, c.host.Workdir), fs: c.fs})
		}
	}
	return out
}

// writeRecordOn writes version seq of the record (data, run id) to t,
// unless a newer version is there already. A detached run's failures are
// warnings; a foreground run's only status and ps read, and its terminal
// has said what happened to the host.
func (r *runner) writeRecordOn(t recordTarget, seq int, data []byte, detached bool) {
	mu, _ := r.recHostMu.LoadOrStore(t.name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	r.connMu.Lock()
	stale := r.recWritten[t.name] > seq
	id := r.runID
	r.connMu.Unlock()
	if stale {
		return
	}
	if err := hostio.WriteRecord(t.fs, t.wd, id, data); err != nil {
		if detached {
			r.events.printf("warning: record run %s on %s: %v", id, t.name, err)
		} else {
			r.events.debugf("record run %s on %s: %v", id, t.name, err)
		}
		return
	}
	r.connMu.Lock()
	if r.recWritten == nil {
		r.recWritten = map[string]int{}
	}
	r.recWritten[t.name] = seq
	r.connMu.Unlock()
}

// newestCheckpoint names the newest checkpoint in the run's record ("" for
// none, or before the record is loaded).
func (r *runner) newestCheckpoint() string {
	rec, err := r.checkpointRecord(r.logRoot, r.runRec.Job)
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

// stopPoll is how often a run's supervisor looks for a stop that
// `drover stop` asked for.
const stopPoll = time.Second

// watchStopRequest ends ctx (cancel, with the *hostio.StopRequest as the
// cause) once `drover stop` wrote the run's stop file on one of the
// hosts; --abort also closes r.abort. A foreground run watches too: `drover
// stop` from another terminal ends it as Ctrl-C would, and its terminal
// says who stopped it.
func (r *runner) watchStopRequest(ctx context.Context, cancel context.CancelCauseFunc) {
	r.stopRequested = cancel
	go func() {
		for {
			if err := hostio.Sleep(ctx, stopPoll); err != nil {
				return
			}
			// Nothing before the run's first record (setRecord with
			// the conns): a foreground run may adopt another run
			// until then, which changes its id.
			r.connMu.Lock()
			conns := r.conns
			r.connMu.Unlock()
			if conns == nil {
				continue
			}
			r.noteCheckpoint()
			r.shareCheckpoints()
			if r.stopAsked() {
				return
			}
		}
	}()
}

// stopAsked looks for the run's stop file on its hosts now, and when
// `drover stop` wrote one, ends the run's context with the request as the
// cause (and with --abort closes r.abort). The run looks once more before
// it restarts a group that failed: a stop during an adoption stops the
// group through its agents while the record still names the gone
// supervisor, and the failure it makes must end the run, not restart it.
func (r *runner) stopAsked() bool {
	r.connMu.Lock()
	conns := r.conns
	r.connMu.Unlock()
	if conns == nil || r.stopRequested == nil {
		return false
	}
	for _, t := range r.recordTargets(conns) {
		req, err := hostio.ReadStopRequest(t.fs, t.wd, r.runID)
		if err != nil {
			continue
		}
		how := "stop"
		if req.Abort {
			how = "abort"
			r.abortOnce.Do(func() { close(r.abort) })
		}
		r.events.printf("%s (%s): stopping every process", req, how)
		r.stopRequested(req)
		return true
	}
	return false
}

// finalState is the run record's state for how the run ended.
func finalState(o Outcome) agent.RunState {
	switch o {
	case Succeeded:
		return agent.RunSucceeded
	case Interrupted:
		return agent.RunStopped
	}
	return agent.RunFailed
}

// endRecord records in rec how the run ended (res); a run that never
// ran says why: one that ended queued (stopped there), or one that
// waited --queue-timeout, whatever its record said last.
func endRecord(rec *agent.RunRecord, res *Result) {
	var qt *QueueTimeoutError
	if res.Err != nil && (rec.State == agent.RunQueued || errors.As(res.Err, &qt)) {
		rec.Reason = res.Err.Error()
	}
	rec.State = finalState(res.Outcome)
}

// supervisorHost is this machine's name for the run record.
func supervisorHost() string {
	h, _ := os.Hostname()
	return h
}

// DescribeDetached says, for `drover run -d`, how to follow and stop run
// id.
func DescribeDetached(id, job string) string {
	return fmt.Sprintf("run %s started in the background\n  follow: drover logs %s --follow\n  status: drover status %s\n  stop:   drover stop %s", id, job, job, job)
}

// DescribeQueued says, for `drover run -d --queue`, that run id waits
// for its GPUs in the background, and how to follow and stop it.
func DescribeQueued(id, job string) string {
	return fmt.Sprintf("run %s waits for GPUs in the background (queued); it starts once they are free\n  status: drover status %s\n  follow: drover logs %s --follow\n  stop:   drover stop %s (leaves the queue)", id, job, job, job)
}

// queueNote is what an attempt's plan phase calls (planPhase.queued)
// when it waits in host's GPU queue: line says where, and who holds the
// GPUs ("" once the wait there is over). The run is recorded queued on
// conns, the attempt's hosts (noteQueue); the first time, a detached
// --queue run tells `drover run -d` (RunOptions.Queued), which returns.
func queueNote(r *runner, attempt int) func(conns []*hostConn, host, line string) {
	return func(conns []*hostConn, host, line string) {
		r.connMu.Lock()
		_, said := r.runRec.Queue[host]
		r.connMu.Unlock()
		if line == "" && !said {
			return // no wait said on host: nothing to take back
		}
		r.setRecord(conns, func(rec *agent.RunRecord) { noteQueue(rec, attempt, host, line) })
		if line != "" && r.opts.Queued != nil {
			r.readyOnce.Do(func() { r.opts.Queued(r.runID, r.runLogDir) })
		}
	}
}

// noteQueue records in rec that attempt waits in host's GPU queue as
// line says, or ("") no longer does: queued while it waits on any host,
// starting once it holds every host's GPUs.
func noteQueue(rec *agent.RunRecord, attempt int, host, line string) {
	rec.State, rec.Attempt = agent.RunQueued, attempt
	if rec.Queue == nil {
		rec.Queue = map[string]string{}
	}
	if line != "" {
		rec.Queue[host] = line
		return
	}
	delete(rec.Queue, host)
	if len(rec.Queue) == 0 {
		rec.State = agent.RunStarting
	}
}

// A detached run's checkpoint record goes with the run: its supervisor
// keeps a copy in the run's directory on every host (shareCheckpoints),
// and a supervisor that adopts the run from a machine that has no record
// of it, or an older one, takes that copy (takeSharedCheckpoints), so the
// adopted run goes on with the same record, as issue 26 asks: the same
// sequence numbers, digests and holders.

// sharedRecordFile is the record's copy in a run's directory on a host.
const sharedRecordFile = "checkpoints.json"

// shareCheckpoints writes the checkpoint record to every host of a
// detached run when it changed since it was last written there. It runs
// from the supervisor's stop poll, once a second at most.
func (r *runner) shareCheckpoints() {
	if !r.detachedGroup {
		return
	}
	rec, err := r.checkpointRecord(r.logRoot, r.runRec.Job)
	if err != nil || rec == nil {
		return
	}
	data, n, err := rec.Shared()
	r.connMu.Lock()
	conns, changed := r.conns, n != r.sharedChanges
	r.connMu.Unlock()
	if err != nil || !changed || conns == nil {
		return
	}
	targets := r.recordTargets(conns)
	if len(targets) < len(conns) {
		return // a host without file access: written again at the next poll
	}
	failed := forEach(targets, func(t recordTarget) error {
		return hostio.WriteAtomic(t.fs, path.Join(t.wd, agent.RunDir(r.runID)), sharedRecordFile, data)
	})
	if failed != nil {
		return // written again at the next poll
	}
	r.connMu.Lock()
	r.sharedChanges = n
	r.connMu.Unlock()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
