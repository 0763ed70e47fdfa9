package push

// What the phases of a push share (hostPush) and the progress they report
// (tally).

import (
	"context"
	"path"
	"sync"

	"github.com/droverhq/drover/cluster"
)

// hostPush is one host's push (Sync; its phases in run): what its four
// phases share, and all they share: the host's FS and workdir, the tree,
// the options, the tally of what was done, and the directory requests
// more than one phase makes. Each phase passes its own findings forward
// as values (hostScan, plan) rather than leaving them here, so that what
// a phase reads shows in what it is handed; only the tally changes, under
// its lock.
type hostPush struct {
	fs      cluster.FS
	workdir string
	tree    *Tree
	opts    Options
	*tally
}

// remote is the host's path of rel, a path of the tree.
func (e *hostPush) remote(rel string) string { return path.Join(e.workdir, rel) }

// dirRemover is an FS that removes an empty directory with one request
// (cluster's): Remove, which takes a file or a directory, costs pkg/sftp
// two for a directory (a REMOVE that fails, then an RMDIR).
type dirRemover interface {
	RemoveDir(path string) error
}

// removeDir removes the empty directory name.
func (e *hostPush) removeDir(name string) error {
	if d, ok := e.fs.(dirRemover); ok {
		return d.RemoveDir(name)
	}
	return e.fs.Remove(name)
}

// removeDirs removes dirs that are empty, a level at a time, deepest
// first, one RMDIR each: the directories pushed before and gone locally,
// or those mkdirsEarly made for a push that failed. A directory that is
// not empty (the job's files), or not a directory, stays.
func (e *hostPush) removeDirs(dirs []Dir) {
	levels := byDepth(dirs)
	for i := len(levels) - 1; i >= 0; i-- {
		_ = forEach(context.Background(), len(levels[i]), max(e.opts.concurrency(), dirConcurrency), func(_ context.Context, j int) error {
			_ = e.removeDir(e.remote(levels[i][j].Path))
			return nil
		})
	}
}

// mkdirs creates dirs (sorted by path: parents first) a depth at a time,
// the directories of one depth in parallel: each then costs one request,
// its parent being there, and a tree costs a round trip per level, not
// per directory.
func (e *hostPush) mkdirs(ctx context.Context, dirs []Dir) error {
	for _, level := range byDepth(dirs) {
		err := forEach(ctx, len(level), max(e.opts.concurrency(), dirConcurrency), func(_ context.Context, i int) error {
			if err := e.fs.MkdirAll(e.remote(level[i].Path), 0o755); err != nil {
				return fileErr("create directory", level[i].Path, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// dirConcurrency is how many directories a push lists, creates or sets
// the mode of at once, per host. Those are small requests (a listing is
// four: open, read, read to the end, close), not bounded like the uploads
// (Options.Concurrency): 16 at a time, a tree of 200 directories took 13
// listings in a row, 52 round trips, before every attempt.
const dirConcurrency = 128

// tally is a Sync's Result and Progress, which every phase updates, from
// many goroutines at once (uploads, removals): one lock for both, so that
// reports for one host never overlap.
type tally struct {
	mu       sync.Mutex
	res      *Result
	progress Progress
	onReport func(Progress) // Options.Progress
}

// report updates this host's progress under the lock and passes a copy to
// Options.Progress, so calls for one host never overlap.
func (t *tally) report(update func(*Progress)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	update(&t.progress)
	if t.onReport != nil {
		t.onReport(t.progress)
	}
}

// result updates the Result under the lock.
func (t *tally) result(update func(*Result)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	update(t.res)
}

// warn adds a warning to the Result.
func (t *tally) warn(msg string) {
	t.result(func(r *Result) { r.Warnings = append(r.Warnings, msg) })
}

// sent counts one file as arrived.
func (t *tally) sent() {
	t.report(func(pr *Progress) { pr.FilesDone++ })
	t.result(func(r *Result) { r.FilesSent++ })
}

// sentBytes counts n more bytes sent.
func (t *tally) sentBytes(n int64) {
	t.result(func(r *Result) { r.BytesSent += n })
	t.report(func(pr *Progress) { pr.BytesDone += n })
}
