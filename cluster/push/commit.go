package push

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sync"
)

// The commit, a push's last phase: the uploads move into place and the
// state files (manifest or delta, journal, sum) are written in the order
// that keeps a host's state trustworthy whenever the push stops. Its
// state files are staged while the upload runs (stage), and the host
// marked once the upload's content has arrived (markHost): see
// uploadAndMark.

// committer moves one host's uploads into place and writes its state.
type committer struct {
	*hostPush
}

// repairSum writes the sum of a host whose tree is up to date but has
// none (lost, or a push by an older drover), so that the next push is
// cheap again. A failure is only a warning: the tree is right.
func (c *committer) repairSum(p *plan) {
	if err := writeSum(c.fs, c.workdir, stateSum{c.tree.key, p.base.base, p.base.baseSize}); err != nil {
		c.warn(err.Error())
	}
}

// Where the commit stages its state files, under tmpDir.
const (
	finalStaged   = tmpDir + "/manifest-final.json"   // the new manifest ...
	deltaStaged   = tmpDir + "/manifest.delta"        // ... or the delta over the host's
	pendingStaged = tmpDir + "/pending.json"          // the journal ...
	claimStaged   = tmpDir + "/manifest-pending.json" // ... or, without a manifest, a whole pending one
)

// stage writes the state files commit will rename into place: the new
// manifest or delta, and what marks the changing entries pending. (The sum
// is a link, created in place at the end.)
func (c *committer) stage(p *plan) error {
	files := map[string][]byte{}
	if p.delta != nil {
		files[deltaStaged] = p.delta
	} else {
		files[finalStaged] = c.tree.manifest
	}
	if !p.known {
		files[claimStaged] = encodeManifest(c.pendingManifest(p))
	}
	if p.journaled() {
		files[pendingStaged] = encodeManifest(c.journal(p))
	}
	var fns []func() error
	for name, data := range files {
		fns = append(fns, func() error {
			if err := createWith(c.fs, c.remote(name), data); err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
			return nil
		})
	}
	return parallel(fns...)
}

// earlyStage is the commit's state files staged beside a preUpload,
// before guard: the journal it staged is that of the plan before guard.
type earlyStage struct {
	journal []byte        // the journal staged
	staged  chan struct{} // closed once the state files are; err says how
	err     error
}

// wait waits for the staging to end.
func (es *earlyStage) wait() { <-es.staged }

// stageEarly starts staging p's state files (a copy of p: guard rewrites
// it) beside a preUpload.
func (c *committer) stageEarly(p *plan) *earlyStage {
	q := *p
	es := &earlyStage{staged: make(chan struct{})}
	if q.journaled() {
		es.journal = encodeManifest(c.journal(&q))
	}
	go func() {
		defer close(es.staged)
		es.err = c.stage(&q)
	}()
	return es
}

// finishStage waits for the early staging and stages the journal
// again if guard made the plan touch more than it lists.
func (c *committer) finishStage(p *plan, es *earlyStage) error {
	<-es.staged
	if es.err != nil {
		return es.err
	}
	if j := encodeManifest(c.journal(p)); p.journaled() && !bytes.Equal(j, es.journal) {
		if err := createWith(c.fs, c.remote(pendingStaged), j); err != nil {
			return fmt.Errorf("write %s: %w", pendingStaged, err)
		}
	}
	return nil
}

// markHost readies the host's state before anything in the tree changes:
// no sum may vouch for the old manifest any more, and every entry about to
// change is recorded as pending (the staged journal, and a whole manifest
// when there was none, moved into place), so that if the push stops now
// the next one re-sends those entries rather than trusting the old
// manifest. They go in parallel: a journal beside a still-valid sum is
// ignored, and the tree has not changed yet.
func (c *committer) markHost(p *plan) error {
	// A state file look saw was not there is not removed: a REMOVE of a
	// missing file costs pkg/sftp a second round trip (an RMDIR).
	var fns []func() error
	if !p.noSum {
		fns = append(fns, func() error { return removeState(c.fs, c.workdir, sumName) })
	}
	if p.delta == nil && !p.noDelta {
		// A delta left over a base with the key of the one written
		// now (a tree pushed again) would apply to it.
		fns = append(fns, func() error { return removeState(c.fs, c.workdir, deltaName) })
	}
	if !p.known {
		fns = append(fns, func() error { return c.place(claimStaged, manifestName) })
	}
	if p.journaled() {
		fns = append(fns, func() error { return c.place(pendingStaged, journalName) })
	}
	return parallel(fns...)
}

// journal lists the entries commit is about to change, all pending; read
// over the old manifest it tells the next push what it cannot trust.
func (c *committer) journal(p *plan) *manifest {
	m := newManifest()
	c.markPending(m, p)
	return m
}

// pendingManifest is the whole manifest a first push (no usable one on
// the host) starts with, the entries it changes pending: it owns the new
// files while they move, so that none stays unowned if the push stops.
func (c *committer) pendingManifest(p *plan) *manifest {
	m := newManifest()
	for i := range c.tree.Files {
		f := &c.tree.Files[i]
		m.Files[f.Path] = fileEntry(f)
	}
	c.markPending(m, p)
	return m
}

// markPending puts in m every entry p changes, pending and without a
// digest, so that no push trusts them until a commit has finished.
func (c *committer) markPending(m *manifest, p *plan) {
	for _, f := range append(append([]*File(nil), p.send...), p.meta...) {
		e := fileEntry(f)
		e.Pending = true
		e.SHA256 = ""
		m.Files[f.Path] = e
	}
	for _, d := range append(append([]Dir(nil), p.mkdirs...), p.chdirs...) {
		m.Dirs[d.Path] = manifestDir{Mode: d.Mode, Pending: true}
	}
}

// fileEntry is f as the manifest lists it.
func fileEntry(f *File) manifestFile {
	return manifestFile{SHA256: f.SHA256, Size: f.Size, Mode: f.Mode, MTime: f.ModTime.UnixNano()}
}

// place renames a staged state file over its live name (atomically).
func (c *committer) place(staged, name string) error {
	if err := c.fs.Rename(c.remote(staged), c.remote(name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// commit moves the uploads into place, on a host uploadAndMark has marked. The order
// of the state files is what keeps a host's state trustworthy: sum removed
// and journal written (markHost, once every upload's content arrived),
// tree changed and manifest in place, then sum written. A sum on the host
// therefore always vouches for a complete push, and an upload whose
// content fails to arrive leaves the state files as they were.
func (c *committer) commit(ctx context.Context, p *plan) error {
	err := c.removeGone(ctx, p)
	if err != nil {
		return err
	}
	placeManifest := func() error { return c.place(finalStaged, manifestName) }
	sum := stateSum{tree: c.tree.key, base: c.tree.key, baseSize: int64(len(c.tree.manifest))}
	if p.delta != nil {
		placeManifest = func() error { return c.place(deltaStaged, deltaName) }
		sum.base, sum.baseSize = p.base.base, p.base.baseSize
	}
	if p.journaled() {
		// The journal marks every entry the change touches as pending,
		// over whichever manifest is beside it: the new one may land
		// while the files move, one round trip sooner. (Deletions are
		// done: a manifest without a file must not precede its removal,
		// or the file would stay, unowned.)
		err = parallel(func() error { return c.changeTree(ctx, p) }, placeManifest)
	} else {
		// Without a journal (only deletions), the manifest must
		// follow the tree.
		if err = c.changeTree(ctx, p); err == nil {
			err = placeManifest()
		}
	}
	if err != nil {
		return err
	}
	// The rest may go in parallel: a journal left beside a valid sum is
	// ignored (the sum vouches for the manifest), and tmpDir is empty now,
	// every upload and state file renamed out, but for the directories of
	// staged trees not moved whole.
	return parallel(
		func() error {
			// A journal this push wrote, or one left beside a manifest
			// that was unusable (!p.known), must not outlive the new
			// manifest.
			if !p.known || p.journal || p.journaled() {
				return removeState(c.fs, c.workdir, journalName)
			}
			return nil
		},
		func() error { return placeSum(c.fs, c.workdir, sum) },
		func() error { return c.removeTmp(p) },
	)
}

// removeGone removes, first in a commit, the links that directories of
// the tree replace (guard), then the files and directories pushed before
// and gone locally.
func (c *committer) removeGone(ctx context.Context, p *plan) error {
	for _, rel := range p.unlink {
		// The link itself: Remove never follows it.
		if err := c.fs.Remove(c.remote(rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fileErr("replace the symbolic link", rel, err)
		}
	}
	deleted := 0
	var dmu sync.Mutex
	err := forEach(ctx, len(p.deletes), c.opts.concurrency(), func(_ context.Context, i int) error {
		err := c.fs.Remove(c.remote(p.deletes[i]))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fileErr("remove", p.deletes[i], err)
		}
		if err == nil {
			dmu.Lock()
			deleted++
			dmu.Unlock()
		}
		return nil
	})
	c.result(func(r *Result) { r.FilesDeleted = deleted })
	if err != nil {
		return err
	}
	// One fails when the job put files there: then the directory stays.
	gone := make([]Dir, len(p.rmdirs))
	for i, d := range p.rmdirs {
		gone[i] = Dir{Path: d}
	}
	c.removeDirs(gone)
	return nil
}

// changeTree puts the uploads, directories and modes in place.
func (c *committer) changeTree(ctx context.Context, p *plan) error {
	conc := c.opts.concurrency()
	renames := func(which func(rel string) bool) error {
		return forEach(ctx, len(p.send), conc, func(_ context.Context, i int) error {
			if !which(p.send[i].Path) {
				return nil
			}
			return c.rename(p.tmpOf(i), p.send[i].Path)
		})
	}
	// The files outside the staged trees move in while the trees do: one
	// round trip fewer (rename makes a parent not there yet).
	loose := func(rel string) bool { return len(p.roots) > 0 && p.rootOf(rel) == "" }
	var moved map[string]bool
	err := parallel(
		func() error { moved = c.moveTrees(ctx, p); return nil },
		func() error { return renames(loose) },
	)
	if err != nil {
		return err
	}
	var mkdirs []Dir
	for _, d := range p.mkdirs {
		if !moved[p.rootOf(d.Path)] {
			mkdirs = append(mkdirs, d)
		}
	}
	if !p.dirsMade {
		if err := c.mkdirs(ctx, mkdirs); err != nil {
			return err
		}
	}
	// A directory mode that leaves the owner able to write and search
	// (u+wx) is set while the files move in, which it does not stop; the
	// others last, so that a read-only directory still receives its
	// files. A moved tree's have theirs from tar.
	var early, late []Dir
	for _, d := range append(append([]Dir(nil), mkdirs...), p.chdirs...) {
		if d.Mode&0o300 == 0o300 {
			early = append(early, d)
		} else {
			late = append(late, d)
		}
	}
	err = parallel(
		func() error {
			return renames(func(rel string) bool { return !loose(rel) && !moved[p.rootOf(rel)] })
		},
		func() error {
			return forEach(ctx, len(p.meta), conc, func(_ context.Context, i int) error {
				return c.setMeta(p.meta[i])
			})
		},
		func() error { return c.chmodDirs(ctx, early) },
	)
	if err != nil {
		return err
	}
	return c.chmodDirs(ctx, late)
}

// moveTrees moves each staged tree into place with one rename and
// returns the roots it moved. A root that cannot be moved (the host has a
// directory of that name with files in it, or the parent is gone) is left
// for commit to move file by file.
func (c *committer) moveTrees(ctx context.Context, p *plan) map[string]bool {
	ok := make([]bool, len(p.roots))
	_ = forEach(ctx, len(p.roots), c.opts.concurrency(), func(_ context.Context, i int) error {
		r := p.roots[i]
		ok[i] = c.fs.Rename(c.remote(path.Join(tmpDir, treeStage, r)), c.remote(r)) == nil
		return nil
	})
	moved := make(map[string]bool, len(p.roots))
	for i, r := range p.roots {
		if ok[i] {
			moved[r] = true
		}
	}
	return moved
}

// rename moves one upload into place, recreating its parent directory if
// someone removed it on the host since the last push.
func (c *committer) rename(tmp, rel string) error {
	err := c.fs.Rename(c.remote(tmp), c.remote(rel))
	if errors.Is(err, fs.ErrNotExist) {
		if err = c.fs.MkdirAll(path.Dir(c.remote(rel)), 0o755); err == nil {
			err = c.fs.Rename(c.remote(tmp), c.remote(rel))
		}
	}
	if err != nil {
		return fileErr("move into place", rel, err)
	}
	return nil
}

// setMeta sets the mode and mtime of a file whose content is unchanged:
// independent requests, one round trip for both.
func (c *committer) setMeta(f *File) error {
	return parallel(
		func() error {
			if err := c.fs.Chmod(c.remote(f.Path), f.Mode); err != nil {
				return fileErr("set mode of", f.Path, err)
			}
			return nil
		},
		func() error {
			if err := c.fs.Chtimes(c.remote(f.Path), f.ModTime, f.ModTime); err != nil {
				return fileErr("set mtime of", f.Path, err)
			}
			return nil
		},
	)
}

// chmodDirs sets the modes of dirs in parallel. A directory that is gone
// is created first: one a journal left pending may never have been
// created, and one that holds files may be being created by a rename
// beside this (rename).
func (c *committer) chmodDirs(ctx context.Context, dirs []Dir) error {
	return forEach(ctx, len(dirs), max(c.opts.concurrency(), dirConcurrency), func(_ context.Context, i int) error {
		d := dirs[i]
		err := c.fs.Chmod(c.remote(d.Path), d.Mode)
		if errors.Is(err, fs.ErrNotExist) {
			if err = c.fs.MkdirAll(c.remote(d.Path), 0o755); err == nil {
				err = c.fs.Chmod(c.remote(d.Path), d.Mode)
			}
		}
		if err != nil {
			return fileErr("set mode of directory", d.Path, err)
		}
		return nil
	})
}

// removeTmp removes the upload directory once commit moved everything out
// of it: two RMDIRs at most (the staged trees' directory, then it), where
// RemoveAll lists each (four round trips a directory: twelve for a
// streamed push, which was most of its commit). Only what a commit cannot
// leave empty (a tree staged under a new directory whose parent it does
// not create: an empty parent stays) is removed whole.
func (c *committer) removeTmp(p *plan) error {
	var err error
	if len(p.roots) > 0 {
		err = c.removeDir(c.remote(path.Join(tmpDir, treeStage)))
	}
	if err == nil {
		err = c.removeDir(c.remote(tmpDir))
	}
	if err != nil && len(p.roots) > 0 {
		err = c.fs.RemoveAll(c.remote(tmpDir))
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", tmpDir, err)
	}
	return nil
}

// CommitError is a push that failed while it moved the uploaded files
// into place: the host holds some new files among the old ones, and a
// journal naming every entry in doubt, from which the next push (every
// `drover run` pushes before it starts anything) repairs it. A push that
// fails before its commit leaves the previous tree; one whose commit
// finished, the new tree, even if it was cancelled meanwhile.
type CommitError struct {
	Err error
}

func (e *CommitError) Error() string {
	return fmt.Sprintf("stopped while moving files into place (%v): the host holds a mix of the previous and the new files until the next push or run repairs it", e.Err)
}

func (e *CommitError) Unwrap() error { return e.Err }
