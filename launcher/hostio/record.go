package hostio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/launcher/agent"
)

// WriteRecord writes data (JSON and a newline) as run id's record in
// workdir wd over fsys, and points the newest-run link at it.
func WriteRecord(fsys cluster.FS, wd, id string, data []byte) error {
	if err := WriteAtomic(fsys, path.Join(wd, agent.RunDir(id)), agent.RunRecordFile, data); err != nil {
		return err
	}
	cur := path.Join(wd, agent.CurrentRun)
	if old, err := fsys.Readlink(cur); err == nil && old == id {
		return nil
	}
	_ = fsys.Remove(cur)
	return fsys.Symlink(id, cur)
}

// WriteAtomic writes data as dir/name over fsys, through a temporary
// name: a reader sees the old file or the new one, never half of one.
func WriteAtomic(fsys cluster.FS, dir, name string, data []byte) error {
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := path.Join(dir, "."+name+".tmp")
	w, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	_, werr := w.Write(data)
	if err := errors.Join(werr, w.Close()); err != nil {
		return err
	}
	return fsys.Rename(tmp, path.Join(dir, name))
}

// ReadSmall reads at most limit bytes of p over fsys: a file on a host is
// the host's, and may be any size.
func ReadSmall(fsys cluster.FS, p string, limit int64) ([]byte, error) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	_, err = io.Copy(&b, io.LimitReader(f, limit))
	return b.Bytes(), err
}

// Sleep waits d, or until ctx ends (its error then): the pause between a
// host's retries, the run's (RunOptions.Sleep's default) and the verbs'.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopByFile, in a run's directory beside agent.StopFile, says who asked
// for the stop. `drover stop` writes it first, so a supervisor that reads
// the stop file finds it; a supervisor that does not know it reads the
// stop file alone, as before.
const StopByFile = "stop-by"

// StopRequest is `drover stop` as the run's supervisor reads it from a
// host: how (Abort: kill at once) and who asked (By, "" if unknown). It
// is the error a stopped run ends with.
type StopRequest struct {
	Abort bool
	By    string
}

func (s *StopRequest) Error() string {
	if s.By == "" {
		return "stopped by drover stop"
	}
	return "stopped by drover stop from " + s.By
}

// stopRequestLimit bounds what is read of a stop file: a file on a host
// is the host's.
const stopRequestLimit = 4096

// WriteStopRequest asks run id's supervisor in workdir wd to stop (abort:
// at once), saying who asks (by).
func WriteStopRequest(fsys cluster.FS, wd, id string, abort bool, by string) error {
	dir := path.Join(wd, agent.RunDir(id))
	what := "stop"
	if abort {
		what = "abort"
	}
	if by != "" {
		if err := WriteAtomic(fsys, dir, StopByFile, []byte(by+"\n")); err != nil {
			return err
		}
	}
	return WriteAtomic(fsys, dir, agent.StopFile, []byte(what+"\n"))
}

// ReadStopRequest reads run id's stop request in workdir wd (an error
// when there is none). Who asked is returned as written: the caller
// escapes it before it reaches a terminal.
func ReadStopRequest(fsys cluster.FS, wd, id string) (*StopRequest, error) {
	dir := path.Join(wd, agent.RunDir(id))
	b, err := ReadSmall(fsys, path.Join(dir, agent.StopFile), stopRequestLimit)
	if err != nil {
		return nil, err
	}
	req := &StopRequest{Abort: strings.TrimSpace(string(b)) == "abort"}
	if by, err := ReadSmall(fsys, path.Join(dir, StopByFile), stopRequestLimit); err == nil {
		req.By = strings.TrimSpace(string(by))
	}
	return req, nil
}
