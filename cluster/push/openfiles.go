package push

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/droverhq/drover/cluster"
)

// openBudget is how many of a tree's files the pushes of it hold open at
// once, every host together: a quarter of `ulimit -n`, so that the
// connections (one per host) and a local transport's destination files
// fit beside them. Without it a first push to 32 hosts opened each file
// once per host, all at once, and failed at the common default of 256.
func openBudget() int {
	limit := cluster.OpenFileLimit()
	if limit == 0 {
		return 64
	}
	return int(max(4, min(limit/4, 4096)))
}

// source is what an upload reads of a file: the file itself (live), whose
// stat is checked after the read (checkUnchanged), or its snapshot, which
// cannot change (live nil).
type source struct {
	io.Reader
	live *os.File
}

// openSource opens f for reading once one of the tree's open-file slots
// is free (Tree.open; a Tree made without a scan has no bound); done
// closes it and gives the slot back. Running out of descriptors anyway
// (other code of the process holds them) is named as such. A snapshot
// (File.snap) is read where it is, at no slot's cost.
func (t *Tree) openSource(ctx context.Context, f *File) (src source, done func(), err error) {
	if f.snap != nil {
		return source{Reader: io.NewSectionReader(f.snap, 0, f.Size)}, func() {}, nil
	}
	if t.open != nil {
		select {
		case t.open <- struct{}{}:
		case <-ctx.Done():
			return source{}, nil, ctx.Err()
		}
	}
	release := func() {
		if t.open != nil {
			<-t.open
		}
	}
	r, err := os.Open(f.src)
	if err != nil {
		release()
		if cluster.IsTooManyOpenFiles(err) {
			return source{}, nil, cluster.NameOpenFiles("read "+f.Path, err)
		}
		return source{}, nil, fmt.Errorf("read %s: %w", f.Path, err)
	}
	return source{Reader: r, live: r}, func() { r.Close(); release() }, nil
}
