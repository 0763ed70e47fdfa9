package push

// What a push does ahead of its turn, so that its round trips overlap:
// the first requests of the plan (look), the listing of the host's tree
// beside the plan (lister), the uploads of a verified push beside that
// listing (preUpload), and the directories of a push into a new workdir
// beside its uploads (mkdirsEarly). Each says why what it moves forward
// keeps a push's guarantees.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
)

// lister returns how run gets the host's tree as listTree lists it
// (Options.Verify), and what waits for the listing to end. The listing is
// read-only, and the plan does not change what it lists, so it starts at
// once, beside the plan; but for a workdir the caller says is new, it
// starts only if look found otherwise (else the tree is not there:
// emptyView). listed is called from run's goroutine only.
func (s *syncer) lister(ctx context.Context) (listed func() (hostView, error), wait func()) {
	if s.opts.Verify == VerifyNone {
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
			view, err = s.listTree(ctx)
		}()
	}
	if !s.opts.NewWorkdir {
		start()
	}
	listed = func() (hostView, error) {
		if s.newWorkdir {
			return s.emptyView(), nil
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

// preUpload is what run sends before guard has the listing of the host's
// tree (VerifyStat): the files the manifest says changed, and the state
// files, which need neither. The listing takes about four round trips
// (open, read, read, close), as long as the upload (create, write, close),
// so a restart after an edit waits for one of them, not both. Anything
// the listing adds (a file drifted on the host) is sent after, and the
// journal staged again if it then lists more. The uploads land in the
// push's own upload directory, which nothing but a commit moves out: a
// push that stops before leaves the tree as it was, as ever.
type preUpload struct {
	send     []*File       // uploaded to tmpName(i), mode and mtime set
	landed   chan struct{} // closed once all of their content is there
	done     chan struct{} // closed once the uploads ended; err says how
	err      error
	journal  []byte        // the journal staged, for the plan before guard
	staged   chan struct{} // closed once the state files are; stageErr
	stageErr error
}

// wait waits for everything the preUpload started.
func (e *preUpload) wait() {
	<-e.done
	<-e.staged
}

// uploadsEarly says whether run uploads before guard (preUpload): when
// it verifies by listing, the host's manifest named the changes, and the
// upload directory is new and empty. Only a few files, which go over
// SFTP: a stream (or the probe of the mode of new files) is decided on
// the whole of what is sent.
func (s *syncer) uploadsEarly(p *plan) bool {
	return s.opts.Verify != VerifyNone && !s.newWorkdir && p.known && p.madeTmp &&
		len(p.send) > 0 && len(p.send) < min(streamMin, probeMin)
}

// startEarly starts the preUpload of p (a copy: guard rewrites p).
func (s *syncer) startEarly(ctx context.Context, p *plan) *preUpload {
	q := *p
	e := &preUpload{send: append([]*File(nil), p.send...),
		landed: make(chan struct{}), done: make(chan struct{}), staged: make(chan struct{})}
	if q.journaled() {
		e.journal = encodeManifest(s.journal(&q))
	}
	var total int64
	for _, f := range e.send {
		total += f.Size
	}
	s.report(func(pr *Progress) { pr.FilesTotal, pr.BytesTotal = len(e.send), total })
	go func() {
		defer close(e.staged)
		e.stageErr = s.stage(&q)
	}()
	arrived := countdown(len(e.send), func() { close(e.landed) })
	go func() {
		defer close(e.done)
		e.err = forEach(ctx, len(e.send), s.opts.concurrency(), func(ctx context.Context, i int) error {
			return s.upload(ctx, e.send[i], s.remote(tmpName(i)), arrived)
		})
	}()
	return e
}

// finishStage waits for the preUpload's staging and stages the journal
// again if guard made the plan touch more than it lists.
func (s *syncer) finishStage(p *plan) error {
	<-s.pre.staged
	if s.pre.stageErr != nil {
		return s.pre.stageErr
	}
	if j := encodeManifest(s.journal(p)); p.journaled() && !bytes.Equal(j, s.pre.journal) {
		if err := createWith(s.fs, s.remote(pendingStaged), j); err != nil {
			return fmt.Errorf("write %s: %w", pendingStaged, err)
		}
	}
	return nil
}

// uploadRest sends what guard added to the preUpload's files, after them
// (tmpName(len(pre.send)+j)), and sets p.tmp to where each of p.send
// waits; written is called once all of their content is there.
func (s *syncer) uploadRest(ctx context.Context, p *plan, written func()) error {
	early := make(map[string]string, len(s.pre.send))
	for i, f := range s.pre.send {
		early[f.Path] = tmpName(i)
	}
	p.tmp = make([]string, len(p.send))
	var rest []int
	for i, f := range p.send {
		if t, ok := early[f.Path]; ok {
			p.tmp[i] = t
			continue
		}
		p.tmp[i] = tmpName(len(s.pre.send) + len(rest))
		rest = append(rest, i)
	}
	// written once every upload's content is there, the early ones'
	// and the rest's: len(rest)+1 arrivals.
	arrived := countdown(len(rest)+1, written)
	return parallel(
		func() error {
			select {
			case <-s.pre.landed:
				arrived()
				<-s.pre.done
			case <-s.pre.done:
				if s.pre.err == nil { // landed too
					arrived()
				}
			}
			return s.pre.err
		},
		func() error {
			return forEach(ctx, len(rest), s.opts.concurrency(), func(ctx context.Context, j int) error {
				i := rest[j]
				return s.upload(ctx, p.send[i], s.remote(p.tmp[i]), arrived)
			})
		},
	)
}

// look sends the plan's first requests, all at once so that a push with
// nothing to do costs one round trip: the host's state (hostState), the
// upload directory, and, when a change is likely, what lets the push skip
// requests later: whether there is a delta to remove and, for
// Options.NewWorkdir, whether the workdir is as new as the caller says.
func (s *syncer) look(ctx context.Context, p *plan) stateSeen {
	likely := s.tree.fresh || s.opts.NewWorkdir
	var seen stateSeen
	var occupied bool
	fns := []func() error{
		func() error { seen = hostState(s.fs, s.workdir); return nil },
		func() error {
			// A change is likely: the upload directory is created in
			// this round trip, not in one of its own after. That fails
			// if one is left from an interrupted push (or there is no
			// state directory yet).
			if likely && s.fs.Mkdir(s.remote(tmpDir), 0o755) == nil {
				p.madeTmp = true
				return nil
			}
			if _, err := s.fs.Lstat(s.remote(tmpDir)); err == nil {
				p.hadTmp = true
			}
			return nil
		},
	}
	if likely {
		fns = append(fns, func() error {
			_, err := s.fs.Lstat(s.remote(deltaName))
			p.noDelta = errors.Is(err, fs.ErrNotExist)
			return nil
		})
	}
	if s.opts.NewWorkdir {
		fns = append(fns, func() error { occupied = s.occupied(ctx); return nil })
	}
	_ = parallel(fns...)
	p.noSum = seen.noSum
	// The caller's word is taken only where the host agrees: a workdir
	// with push's state or with a top-level directory of the tree in it
	// is pushed to as any other.
	s.newWorkdir = s.opts.NewWorkdir && seen.noManifest && seen.noSum && !occupied
	return seen
}

// occupied reports whether the workdir holds any top-level directory of
// the tree (or one cannot be looked at). Where none is there, nothing
// below them is either: no symbolic link a push could write through
// (guard), which is what a caller wrong about Options.NewWorkdir must not
// make it do. Files of the tree already there are replaced whole (a rename
// never follows a link).
func (s *syncer) occupied(ctx context.Context) bool {
	var top []string
	for _, d := range s.tree.Dirs {
		if !strings.Contains(d.Path, "/") {
			top = append(top, d.Path)
		}
	}
	var found atomic.Bool
	err := forEach(ctx, len(top), len(top), func(_ context.Context, i int) error {
		if _, err := s.fs.Lstat(s.remote(top[i])); !errors.Is(err, fs.ErrNotExist) {
			found.Store(true)
		}
		return nil
	})
	return found.Load() || err != nil
}

// emptyView is the host's tree in a new workdir: none of it there.
func (s *syncer) emptyView() hostView {
	view := make(hostView, len(s.tree.Files)+len(s.tree.Dirs))
	for i := range s.tree.Files {
		view[s.tree.Files[i].Path] = nil
	}
	for _, d := range s.tree.Dirs {
		view[d.Path] = nil
	}
	return view
}

// mkdirsEarly creates the tree's directories while the files upload, in
// a push into a new workdir (p.dirsMade), rather than after the mark: their
// round trips (one per level, mkdirs) then overlap the upload's three.
// Only there: the workdir holds nothing of the tree (look), so a push that
// stops before its commit leaves at most empty directories, and removes
// them when it can (removeDirs); a next push owns them, or leaves them as
// it leaves a job's. Not before a stream, which moves new directories in
// whole.
func (s *syncer) mkdirsEarly(ctx context.Context, p *plan) error {
	if !p.dirsMade {
		return nil
	}
	return s.mkdirs(ctx, p.mkdirs)
}
