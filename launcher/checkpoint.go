package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Checkpoint is the newest complete checkpoint entry found on a host.
type Checkpoint struct {
	Host    string
	Path    string // absolute on Host
	ModTime time.Time
}

// IsTempName reports whether a checkpoint directory entry is a write in
// progress rather than a finished checkpoint. Training code writes to a
// temporary name and renames it into place; drover must never resume from
// the temporary file, which may be half written.
func IsTempName(name string) bool {
	lower := strings.ToLower(name)
	switch {
	case strings.HasPrefix(name, "."), strings.HasSuffix(name, "~"):
		return true
	case strings.HasSuffix(lower, ".tmp"), strings.HasSuffix(lower, ".temp"),
		strings.HasSuffix(lower, ".partial"), strings.HasSuffix(lower, ".part"),
		strings.Contains(lower, ".tmp."), strings.Contains(lower, ".tmp-"),
		strings.HasPrefix(lower, "tmp"):
		return true
	}
	return false
}

// FindCheckpoint returns the newest complete entry directly under dir on one
// host, or ok=false when there is none (including when dir does not exist).
// With a marker, only directories containing that file count: frameworks
// that save a checkpoint as several files write the marker last.
//
// Drover only reads here: checkpoints are never deleted or modified.
func FindCheckpoint(ctx context.Context, fsys cluster.FS, host, dir, marker string) (cp Checkpoint, ok bool, err error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Checkpoint{}, false, nil
		}
		return Checkpoint{}, false, fmt.Errorf("list checkpoints on %s in %s: %w", host, dir, err)
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			return Checkpoint{}, false, ctx.Err()
		}
		if IsTempName(e.Name()) {
			continue
		}
		full := path.Join(dir, e.Name())
		if marker != "" {
			if !e.IsDir() {
				continue
			}
			if _, err := fsys.Stat(path.Join(full, marker)); err != nil {
				continue
			}
		}
		if !ok || e.ModTime().After(cp.ModTime) || (e.ModTime().Equal(cp.ModTime) && full > cp.Path) {
			cp, ok = Checkpoint{Host: host, Path: full, ModTime: e.ModTime()}, true
		}
	}
	return cp, ok, nil
}

// NewestCheckpoint picks the newest of the per-host results.
func NewestCheckpoint(cps []Checkpoint) (Checkpoint, bool) {
	var best Checkpoint
	found := false
	for _, cp := range cps {
		if !found || cp.ModTime.After(best.ModTime) {
			best, found = cp, true
		}
	}
	return best, found
}
