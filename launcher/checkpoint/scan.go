package checkpoint

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

// Found is one complete entry in a checkpoint directory on one host.
type Found struct {
	Host    string
	Name    string
	Path    string // absolute on Host
	Size    int64  // of the entry as listed (a directory's own size)
	ModTime time.Time
	IsDir   bool
	// Stamp identifies this version of the entry on its host: a rewrite
	// under the same name (a "last.pt" saved every epoch) changes it.
	Stamp string
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

// Scan lists the complete entries directly under dir on one host, in name
// order; none when dir does not exist. Only regular files and directories
// are entries: symbolic links, fifos, sockets and devices are not. With a marker, only directories
// containing that file count: frameworks that save a checkpoint as several
// files write the marker last.
//
// Drover only reads here: the user's checkpoints are never deleted or
// modified. A name that is not one directory entry ("..", "", holding "/"
// or NUL: only a hostile or broken server lists one) is left out, and the
// error, beside the entries, names each (*cluster.BadNameError).
func Scan(ctx context.Context, fsys cluster.FS, host, dir, marker string) ([]Found, error) {
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list checkpoints on %s in %s: %w", host, dir, err)
	}
	var out []Found
	var bad []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := cluster.CheckName(host, dir, e.Name()); err != nil {
			bad = append(bad, err)
			continue
		}
		// A link ("latest" -> step-20.pt) points at an entry listed in
		// its own right; counting it would copy that checkpoint twice.
		if IsTempName(e.Name()) || e.Mode()&fs.ModeSymlink != 0 {
			continue
		}
		// Nor is a fifo, socket or device: one taken for the newest
		// checkpoint blocked the open() of every process resuming
		// from it.
		if !e.Mode().IsRegular() && !e.IsDir() {
			continue
		}
		f := Found{Host: host, Name: e.Name(), Path: path.Join(dir, e.Name()), Size: e.Size(), ModTime: e.ModTime(), IsDir: e.IsDir()}
		f.Stamp = fmt.Sprintf("%d:%d", f.Size, f.ModTime.UnixNano())
		if marker != "" {
			if !e.IsDir() {
				continue
			}
			mi, err := fsys.Stat(path.Join(f.Path, marker))
			if err != nil {
				continue
			}
			f.Stamp += fmt.Sprintf(":%d", mi.ModTime().UnixNano())
		}
		out = append(out, f)
	}
	return out, errors.Join(bad...)
}

// ByModTime sorts entries of one host oldest first (ties by path), the
// only place modification times decide an order: for entries drover found
// already there, with no record of when they completed.
func ByModTime(a, b Found) int {
	if c := a.ModTime.Compare(b.ModTime); c != 0 {
		return c
	}
	return strings.Compare(a.Path, b.Path)
}
