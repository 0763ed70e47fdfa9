package stage

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/droverhq/drover/launcher/checkpoint"
)

// commitInFlight is how many of a batch's requests a host has in flight
// at once while the batch is moved into place. Over SFTP each request (a
// rename, an mtime) is a round trip through the controller's connection
// and the host's sshd and sftp-server; one at a time, 1,000 files cost
// 2,000 waits for an answer and as many wake-ups of both processes on
// the host (0.10-0.14 s of its CPU and 0.23 s of wall time per 1,000
// files on the test fleet), and 8 hosts committing at once queue on the
// controller's and the hosts' cores. Pipelined, the server answers them
// back to back: 0.04 s of CPU and 0.06 s.
const commitInFlight = 32

// commit moves a received batch into dest on h, each file with the
// source's mtime, and writes the manifest with the sums the stream
// checked. The manifest is written only once every file is in place: an
// interrupted commit leaves files the manifest does not list, which the
// next staging sends again.
func (s *setStage) commit(ctx context.Context, h Host, st *HostState, seq int, files []string) error {
	dest := s.dest(h)
	batch := path.Dir(checkpoint.ChainDir(Area(dest), seq, entry))
	sums, err := readBatchSums(h, batch)
	if err != nil {
		return err
	}
	if err := place(ctx, h, path.Join(batch, entry), dest, files, func(rel string) int64 { return s.list[rel].MTime }); err != nil {
		return err
	}
	received := make(map[string]string, len(files))
	for _, rel := range files {
		received[rel] = sums[rel]
	}
	st.Manifest = Update(st.Manifest, s.list, received)
	if err := writeManifest(h, dest, s.source(), st.Manifest); err != nil {
		return err
	}
	return h.FS.RemoveAll(batch)
}

// place moves every file of files (paths under the data set) from under
// from into dest on h and gives it its mtime, commitInFlight requests at
// once: first the directories they go into, then each file's rename and
// mtime.
func place(ctx context.Context, h Host, from, dest string, files []string, mtime func(rel string) int64) error {
	err := inFlight(ctx, commitInFlight, leafDirs(dest, files), func(d string) error {
		if err := h.FS.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s on %s: %w", d, h.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return inFlight(ctx, commitInFlight, files, func(rel string) error {
		to := path.Join(dest, rel)
		if err := h.FS.Rename(path.Join(from, rel), to); err != nil {
			return fmt.Errorf("move %s into %s on %s: %w", rel, dest, h.Name, err)
		}
		mt := time.Unix(mtime(rel), 0)
		if err := h.FS.Chtimes(to, mt, mt); err != nil {
			return fmt.Errorf("set the mtime of %s on %s: %w", to, h.Name, err)
		}
		return nil
	})
}

// leafDirs are the directories under dest that files go into, sorted,
// without those that hold another of them: creating the deepest creates
// its parents, so each directory costs one request.
func leafDirs(dest string, files []string) []string {
	dirs := map[string]bool{}
	for _, rel := range files {
		dirs[path.Dir(path.Join(dest, rel))] = true
	}
	inner := map[string]bool{}
	for d := range dirs {
		for p := path.Dir(d); len(p) >= len(dest) && !inner[p]; p = path.Dir(p) {
			inner[p] = true
			if p == path.Dir(p) {
				break
			}
		}
	}
	var out []string
	for d := range dirs {
		if !inner[d] {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// inFlight runs do on every item, at most n at once, and returns the
// first error; once one failed, or ctx ended, no item starts. Every item
// done is nil, even if ctx ended as the last one finished.
func inFlight[T any](ctx context.Context, n int, items []T, do func(T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan T)
	var done atomic.Int64
	var wg sync.WaitGroup
	for range min(n, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				if ctx.Err() != nil {
					continue
				}
				if err := do(it); err != nil {
					cancel(err)
					continue
				}
				done.Add(1)
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case next <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if done.Load() == int64(len(items)) {
		return nil
	}
	return context.Cause(ctx)
}
