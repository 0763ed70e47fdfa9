package hostio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path"
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
