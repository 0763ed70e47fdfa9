package push

import (
	"context"
	"fmt"
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

// openSource opens f for reading once one of the tree's open-file slots
// is free (Tree.open; a Tree made without a scan has no bound); done
// closes it and gives the slot back. Running out of descriptors anyway
// (other code of the process holds them) is named as such.
func (t *Tree) openSource(ctx context.Context, f *File) (r *os.File, done func(), err error) {
	if t.open != nil {
		select {
		case t.open <- struct{}{}:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	release := func() {
		if t.open != nil {
			<-t.open
		}
	}
	r, err = os.Open(f.src)
	if err != nil {
		release()
		if cluster.IsTooManyOpenFiles(err) {
			return nil, nil, cluster.NameOpenFiles("read "+f.Path, err)
		}
		return nil, nil, fmt.Errorf("read %s: %w", f.Path, err)
	}
	return r, func() { r.Close(); release() }, nil
}
