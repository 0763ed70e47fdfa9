package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/droverhq/drover/cluster"
)

// Starting over (`drover run --fresh`): the run resumes from nothing that
// existed before it, and destroys nothing either. drover's own copies
// (on every host and in the mirror) are moved under a set-aside
// directory, where checkpoint_keep never prunes them; the record is
// copied beside itself and goes on (its order still says which of this
// run's checkpoints is newest, and a later run without --fresh resumes
// from this run's); the user's checkpoint_dir is left as it is. Stage
// then considers only the record's entries from the seq StartOver
// returns on (Settings.Since).

// SetAsideDir is where StartOver moves drover's copies on a host whose
// copy area is own (OwnDir): <workdir>/.drover/set-aside/<tag>/checkpoints.
func SetAsideDir(own, tag string) string {
	return path.Join(path.Dir(own), "set-aside", tag, "checkpoints")
}

// SetAsideRecordPath is where StartOver copies a record at path.
func SetAsideRecordPath(path, tag string) string {
	return strings.TrimSuffix(path, ".json") + ".set-aside-" + tag + ".json"
}

// StartOver sets aside what older runs left for resuming (see above),
// records in m what the hosts' checkpoint_dir holds now, and returns the
// first seq this run may resume from: Settings.Since for its Stage
// calls. tag names the set-aside directories (the run's id).
func StartOver(ctx context.Context, m *Manager, hosts []Host, set Settings, tag string) (int, error) {
	if err := m.rec.copyTo(SetAsideRecordPath(m.rec.path, tag)); err != nil {
		return 0, err
	}
	for _, h := range hosts {
		if err := setAside(h.FS, h.Own, SetAsideDir(h.Own, tag)); err != nil {
			return 0, fmt.Errorf("%s: set aside drover's checkpoint copies: %w", h.Name, err)
		}
	}
	if set.Mirror != "" {
		if err := setAsideMirror(m.mirror, set.Mirror, tag); err != nil {
			return 0, err
		}
	}
	if err := m.reconcile(ctx, hosts, set); err != nil {
		return 0, err
	}
	return m.rec.next(), nil
}

// setAside renames dir to dst, making dst's parent; a missing dir is
// nothing to set aside.
func setAside(fsys cluster.FS, dir, dst string) error {
	if _, err := fsys.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if err := fsys.MkdirAll(path.Dir(dst), 0o755); err != nil {
		return err
	}
	return fsys.Rename(dir, dst)
}

// setAsideMirror moves the mirror's checkpoint directories (<seq>) into
// <mirror>/set-aside/<tag>/, where pruning does not look.
func setAsideMirror(fsys cluster.FS, mirror, tag string) error {
	entries, err := fsys.ReadDir(mirror)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("set aside the checkpoint mirror's copies: %w", err)
	}
	for _, e := range entries {
		if _, ok := parseSeqDir(e.Name()); !ok {
			continue
		}
		if err := setAside(fsys, path.Join(mirror, e.Name()), path.Join(mirror, "set-aside", tag, e.Name())); err != nil {
			return fmt.Errorf("set aside the checkpoint mirror's copies: %w", err)
		}
	}
	return nil
}

// copyTo writes the record as it is to dst; without a saved record there
// is nothing to copy.
func (r *Record) copyTo(dst string) error {
	b, err := os.ReadFile(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = os.WriteFile(dst, b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("set aside the checkpoint record: %w", err)
	}
	return nil
}

// next is the seq the next checkpoint drover sees gets.
func (r *Record) next() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data.Next
}
