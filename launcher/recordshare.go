package launcher

import (
	"errors"
	"path"

	"github.com/droverhq/drover/launcher/agent"
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
	if err := c.fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := path.Join(dir, "."+name+".tmp")
	w, err := c.fs.Create(tmp)
	if err != nil {
		return err
	}
	_, werr := w.Write(data)
	if err := errors.Join(werr, w.Close()); err != nil {
		return err
	}
	return c.fs.Rename(tmp, path.Join(dir, name))
}
