package launcher

import (
	"context"
	"errors"
	"path"

	"github.com/droverhq/drover/launcher/agent"
	"github.com/droverhq/drover/launcher/checkpoint"
	"github.com/droverhq/drover/launcher/hostio"
)

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
	rec, err := r.checkpointRecord(r.runRec.Job)
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

// takeSharedCheckpoints reads the record's copy on every host of an
// adopted run and takes the one that knows of most checkpoints, when it
// knows of more than this machine's record. What a host sends is
// bounded and checked (checkpoint.Record.AdoptShared): every location in
// it must be in the job's checkpoint directories or the mirror.
func (a *attempt) takeSharedCheckpoints(ctx context.Context, conns []*attemptHost) {
	rec, err := a.r.checkpointRecord(a.cfg.Job.Name)
	if err != nil {
		return
	}
	places := checkpoint.Places{Hosts: map[string][]string{}, Mirror: a.cfg.Job.CheckpointMirror}
	for _, c := range conns {
		wd := remoteAbs(c.home, c.host.Workdir)
		places.Hosts[c.host.Name] = []string{remoteAbs(wd, a.cfg.Job.CheckpointDir), checkpoint.OwnDir(wd)}
	}
	for _, c := range conns {
		if ctx.Err() != nil || c.fs == nil {
			return
		}
		file := path.Join(remoteAbs(c.home, c.host.Workdir), agent.RunDir(a.r.runID), sharedRecordFile)
		b, err := readSmall(c.fs, file, checkpoint.MaxSharedRecord+1)
		if err != nil {
			continue // none there: an older drover, or a host added since
		}
		took, err := rec.AdoptShared(b, c.host.Name, places)
		if err != nil {
			a.r.events.printf("%s: %v; not taken", a.prefix(), err)
			continue
		}
		if took {
			a.r.events.printf("%s: took run %s's checkpoint record from %s (newest: %s)", a.prefix(), a.r.runID, c.host.Name, orNone(a.r.newestCheckpoint()))
		}
	}
	a.r.connMu.Lock()
	a.r.sharedChanges = -1 // write the adopted record back to every host
	a.r.connMu.Unlock()
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
