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
	r.runRec.Updated = r.now().UTC()
	r.runRec.Foreground = !r.detachedGroup
	hosts := make([]string, len(conns))
	for i, c := range conns {
		hosts[i] = c.host.Name
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
		_ = forEach(conns, func(c *hostConn) error {
			r.writeRecordOn(c, seq, data)
			return nil
		})
	}()
	switch {
	case r.detachedGroup:
		<-done
	case rec.State.Final():
		select {
		case <-done:
		case <-time.After(recordWait):
		}
	}
}

// writeRecordOn writes version seq of the record (data) to c's workdir,
// unless a newer version is there already.
func (r *runner) writeRecordOn(c *hostConn, seq int, data []byte) {
	if c.fs == nil {
		return
	}
	mu, _ := r.recHostMu.LoadOrStore(c.host.Name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	r.connMu.Lock()
	stale := r.recWritten[c.host.Name] > seq
	r.connMu.Unlock()
	if stale {
		return
	}
	wd := remoteAbs(c.home, c.host.Workdir)
	if err := writeRecord(c, wd, r.runID, data); err != nil {
		if r.detachedGroup {
			r.events.printf("warning: record run %s on %s: %v", r.runID, c.host.Name, err)
		} else {
			// Only status and ps read it; the run's own terminal has
			// said what happened to the host.
			r.events.debugf("record run %s on %s: %v", r.runID, c.host.Name, err)
		}
		return
	}
	r.connMu.Lock()
	if r.recWritten == nil {
		r.recWritten = map[string]int{}
	}
	r.recWritten[c.host.Name] = seq
	r.connMu.Unlock()
}

// writeRecord writes data (JSON and a newline) as run id's record in workdir wd over c, and
// points the newest-run link at it.
func writeRecord(c *hostConn, wd, id string, data []byte) error {
	return hostio.WriteRecord(c.fs, wd, id, data)
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
	go func() {
		for {
			if err := hostio.Sleep(ctx, stopPoll); err != nil {
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
				req, err := hostio.ReadStopRequest(c.fs, remoteAbs(c.home, c.host.Workdir), r.runID)
				if err != nil {
					continue
				}
				if req.Abort {
					r.abortOnce.Do(func() { close(r.abort) })
				}
				how := "stop"
				if req.Abort {
					how = "abort"
				}
				r.events.printf("%s (%s): stopping every process", req, how)
				cancel(req)
				return
			}
		}
	}()
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

// supervisorHost is this machine's name for the run record.
func supervisorHost() string {
	h, _ := os.Hostname()
	return h
}

// describeRun says, for `drover run -d`, how to follow and stop run id.
func DescribeDetached(id, job string) string {
	return fmt.Sprintf("run %s started in the background\n  follow: drover logs %s --follow\n  status: drover status %s\n  stop:   drover stop %s", id, job, job, job)
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
	failed := forEach(conns, func(c *hostConn) error {
		if c.fs == nil {
			return errors.New("no file access")
		}
		return writeAtomic(c, path.Join(remoteAbs(c.home, c.host.Workdir), agent.RunDir(r.runID)), sharedRecordFile, data)
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

// writeAtomic writes data as dir/name over c (made private to the login
// user), through a temporary file renamed into place, so that a reader
// never sees half of it.
func writeAtomic(c *hostConn, dir, name string, data []byte) error {
	return hostio.WriteAtomic(c.fs, dir, name, data)
}
