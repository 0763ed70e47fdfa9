package push

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync/atomic"
)

// The scan, a push's first phase: what is there, on one host (scanHost:
// its state files, its upload directory, its tree), beside what is here
// (the Tree, tree.go).

// hostScan is what a push found on the host, the scan's value that the
// plan reads: the state files (hostState, then the manifest they vouch
// for), the upload directory, whether the workdir is new, and the listing
// of the host's tree (VerifyStat), which runs on beside the plan.
type hostScan struct {
	*hostPush
	seen    stateSeen // the host's sum, and which state files are missing
	madeTmp bool      // the upload directory was created (empty) by look
	hadTmp  bool      // leftovers of an interrupted push are there
	noSum   bool      // the host has no manifest.sum to remove
	noDelta bool      // ... nor manifest.delta
	// newWorkdir: Options.NewWorkdir, and look found nothing that says
	// otherwise. The host's tree is then neither listed nor looked at.
	newWorkdir bool
	// listed returns the listing of the host's tree (lister); wait waits
	// for it to end.
	listed func() (hostView, error)
	wait   func()

	// What readManifest read: nothing when the sum names the tree
	// (upToDate); else the host's manifest (old), its base when format 2,
	// whether a journal was beside it, the sum that vouches for them
	// (vouched: the sum named a manifest the memo or the host had), or
	// why there is no usable manifest (err).
	upToDate  bool
	old, base []byte
	journal   bool
	sum       stateSum
	vouched   bool
	err       error
}

// scanHost looks at the host: the listing (Options.Verify) starts at
// once, the state files' first requests go together (look), then the
// manifest the sum names is read (readManifest).
func scanHost(ctx context.Context, e *hostPush) *hostScan {
	h := &hostScan{hostPush: e}
	h.listed, h.wait = h.lister(ctx)
	h.look(ctx)
	h.readManifest()
	return h
}

// readManifest reads the host's manifest, unless the sum says the host
// holds the tree already: from the memo (or the local cache) when the sum
// vouches for one that is there, else from the host (readState). A
// workdir look found without a manifest costs no request more.
func (h *hostScan) readManifest() {
	sum := h.seen.sum
	if sum.tree == h.tree.key && !h.hadTmp {
		h.upToDate = true
		return
	}
	mm := h.tree.known
	if sum.tree != "" {
		h.old, h.base, h.err = readVouched(h.fs, h.workdir, sum, mm)
	}
	h.vouched = sum.tree != "" && h.err == nil
	switch {
	case !h.vouched && h.seen.noManifest:
		// What readState would find, asked for one round trip sooner.
		h.err = fmt.Errorf("%w: %w", errNoManifest, &fs.PathError{Op: "stat", Path: path.Join(h.workdir, manifestName), Err: fs.ErrNotExist})
	case !h.vouched:
		h.old, h.journal, sum, h.base, h.err = readState(h.fs, h.workdir, mm)
	}
	h.sum = sum
}

// lister returns how the plan gets the host's tree as listTree lists it
// (Options.Verify), and what waits for the listing to end. The listing is
// read-only, and the plan does not change what it lists, so it starts at
// once, beside the plan; but for a workdir the caller says is new, it
// starts only if look found otherwise (else the tree is not there:
// emptyView). listed is called from the push's own goroutine only
// (hostPush.run).
func (h *hostScan) lister(ctx context.Context) (listed func() (hostView, error), wait func()) {
	if h.opts.Verify == VerifyNone {
		return func() (hostView, error) { return nil, nil }, func() {}
	}
	var view hostView
	var err error
	var done chan struct{}
	start := func() {
		if done != nil {
			return
		}
		done = make(chan struct{})
		go func() {
			defer close(done)
			view, err = h.listTree(ctx)
		}()
	}
	if !h.opts.NewWorkdir {
		start()
	}
	listed = func() (hostView, error) {
		if h.newWorkdir {
			return h.emptyView(), nil
		}
		start()
		<-done
		return view, err
	}
	wait = func() {
		if done != nil {
			<-done
		}
	}
	return listed, wait
}

// look sends the push's first requests, all at once so that a push with
// nothing to do costs one round trip: the host's state (hostState), the
// upload directory, and, when a change is likely, what lets the push skip
// requests later: whether there is a delta to remove and, for
// Options.NewWorkdir, whether the workdir is as new as the caller says.
func (h *hostScan) look(ctx context.Context) {
	likely := h.tree.fresh || h.opts.NewWorkdir
	var occupied bool
	fns := []func() error{
		func() error { h.seen = hostState(h.fs, h.workdir); return nil },
		func() error {
			// A change is likely: the upload directory is created in
			// this round trip, not in one of its own after. That fails
			// if one is left from an interrupted push (or there is no
			// state directory yet).
			if likely && h.fs.Mkdir(h.remote(tmpDir), 0o755) == nil {
				h.madeTmp = true
				return nil
			}
			if _, err := h.fs.Lstat(h.remote(tmpDir)); err == nil {
				h.hadTmp = true
			}
			return nil
		},
	}
	if likely {
		fns = append(fns, func() error {
			_, err := h.fs.Lstat(h.remote(deltaName))
			h.noDelta = errors.Is(err, fs.ErrNotExist)
			return nil
		})
	}
	if h.opts.NewWorkdir {
		fns = append(fns, func() error { occupied = h.occupied(ctx); return nil })
	}
	_ = parallel(fns...)
	h.noSum = h.seen.noSum
	// The caller's word is taken only where the host agrees: a workdir
	// with push's state or with a top-level directory of the tree in it
	// is pushed to as any other.
	h.newWorkdir = h.opts.NewWorkdir && h.seen.noManifest && h.seen.noSum && !occupied
}

// occupied reports whether the workdir holds any top-level directory of
// the tree (or one cannot be looked at). Where none is there, nothing
// below them is either: no symbolic link a push could write through
// (guard), which is what a caller wrong about Options.NewWorkdir must not
// make it do. Files of the tree already there are replaced whole (a rename
// never follows a link).
func (h *hostScan) occupied(ctx context.Context) bool {
	var top []string
	for _, d := range h.tree.Dirs {
		if !strings.Contains(d.Path, "/") {
			top = append(top, d.Path)
		}
	}
	var found atomic.Bool
	err := forEach(ctx, len(top), len(top), func(_ context.Context, i int) error {
		if _, err := h.fs.Lstat(h.remote(top[i])); !errors.Is(err, fs.ErrNotExist) {
			found.Store(true)
		}
		return nil
	})
	return found.Load() || err != nil
}

// emptyView is the host's tree in a new workdir: none of it there.
func (h *hostScan) emptyView() hostView {
	view := make(hostView, len(h.tree.Files)+len(h.tree.Dirs))
	for i := range h.tree.Files {
		view[h.tree.Files[i].Path] = nil
	}
	for _, d := range h.tree.Dirs {
		view[d.Path] = nil
	}
	return view
}

// listTree lists the workdir and every directory of the tree on the host,
// one request each, in parallel: the types, sizes and mtimes of every
// pushed path (VerifyStat).
func (h *hostScan) listTree(ctx context.Context) (hostView, error) {
	dirs := make([]string, 0, len(h.tree.Dirs)+1)
	dirs = append(dirs, ".")
	for _, d := range h.tree.Dirs {
		dirs = append(dirs, d.Path)
	}
	lists := make([][]fs.FileInfo, len(dirs))
	errs := make([]error, len(dirs))
	err := forEach(ctx, len(dirs), max(h.opts.concurrency(), dirConcurrency), func(_ context.Context, i int) error {
		lists[i], errs[i] = h.fs.ReadDir(h.remote(dirs[i]))
		return nil
	})
	if err != nil {
		return nil, err
	}
	view := make(hostView, len(h.tree.Files)+len(h.tree.Dirs))
	for i := range h.tree.Files {
		view[h.tree.Files[i].Path] = nil
	}
	for _, d := range h.tree.Dirs {
		view[d.Path] = nil
	}
	for i, d := range dirs {
		for _, info := range lists[i] {
			rel := path.Join(d, info.Name())
			if _, ok := view[rel]; ok {
				view[rel] = info
			}
		}
	}
	for i, d := range dirs {
		// Only an error listing a real directory is one: a directory
		// that is gone, a link or a file is what the check is for.
		if info := view[d]; errs[i] != nil && !errors.Is(errs[i], fs.ErrNotExist) && (d == "." || (info != nil && info.IsDir())) {
			return nil, fmt.Errorf("verify: list %s: %w", d, errs[i])
		}
	}
	return view, nil
}
