package push

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// The plan, a push's second phase: what changes on one host, decided
// from what the scan found before anything is written, then checked
// against the host's links and, verifying, its files (guard.go).

// planner decides one host's plan from its scan.
type planner struct {
	*hostPush
	scan *hostScan
}

// plan is what a Sync has to do, decided before anything is written.
type plan struct {
	known    bool     // the host had a usable manifest
	journal  bool     // ... with a journal left by a push that stopped
	send     []*File  // content to upload
	meta     []*File  // same content; mode or mtime to fix
	deletes  []string // files pushed before, gone locally
	rmdirs   []string // directories pushed before, gone locally; deepest first
	mkdirs   []Dir    // directories to create, parents first
	chdirs   []Dir    // existing directories whose mode changed
	hadTmp   bool     // leftovers of an interrupted push to remove
	madeTmp  bool     // the upload directory was created (empty) by the scan (look)
	dirsMade bool     // mkdirs were made during the upload (mkdirsEarly)
	noSum    bool     // the host has no manifest.sum to remove (look)
	noDelta  bool     // ... nor manifest.delta
	unchange int
	// base names the host's base manifest (format 2; base.base is ""
	// when there is none a delta could go over); delta, when not nil, is
	// what commit writes over it instead of a whole new manifest.
	base  stateSum
	delta []byte
	// rewrite: the tree is up to date but its state files are not (a
	// format 1 manifest without a sum): commit writes them anyway.
	rewrite bool
	// resum: the tree is up to date, its manifest too, but the host has
	// no sum: the commit writes it alone (repairSum).
	resum bool
	// roots are new directories staged whole under tmpDir/t, moved into
	// place with one rename each (stageTrees); tmp[i] is then where
	// send[i] waits, tmpName(i) when tmp is nil.
	roots []string
	tmp   []string
	// unlink are symbolic links on the host where the tree has a
	// directory: commit removes them (not what they point to) before the
	// directory is pushed in their place (guard).
	unlink []string
	// view is what the host holds at some paths, when planning looked
	// (planFromStat: every directory), so that guard need not look again.
	view hostView
}

// tmpOf is where send[i] waits in the upload directory: a stream and a
// preUpload decide it (tmp), a plain upload uses its index.
func (p *plan) tmpOf(i int) string {
	if p.tmp != nil {
		return p.tmp[i]
	}
	return tmpName(i)
}

// rootOf is the staged root rel is in or under, or "".
func (p *plan) rootOf(rel string) string {
	for _, r := range p.roots {
		if rel == r || strings.HasPrefix(rel, r+"/") {
			return r
		}
	}
	return ""
}

// empty says whether the plan changes nothing in the tree, so that the
// push ends after its checks without uploading or committing.
func (p *plan) empty() bool {
	return len(p.send)+len(p.meta)+len(p.deletes)+len(p.rmdirs)+len(p.mkdirs)+len(p.chdirs) == 0
}

// plan compares the host's manifest (read by the scan) with the tree.
// Without a usable manifest it stats the remote files instead, or,
// verifying, takes them from the listing of the host's tree, which has
// them already.
func (pl *planner) plan(ctx context.Context) (*plan, error) {
	h := pl.scan
	p := &plan{madeTmp: h.madeTmp, hadTmp: h.hadTmp, noSum: h.noSum, noDelta: h.noDelta}
	if h.upToDate {
		p.unchange = len(pl.tree.Files)
		return p, nil
	}
	err := h.err
	if err == nil {
		err = pl.compare(p)
	}
	switch {
	case err == nil:
		p.known = true
		if p.empty() && !p.hadTmp && !h.journal && stateKey(h.old) == pl.tree.key {
			// Up to date but without a sum (lost, or a push by an older
			// drover): the commit writes it (repairSum) so that the next
			// push is cheap again. A format 1 manifest is replaced first.
			p.rewrite, p.resum = h.base == nil, h.base != nil
		}
		if h.base != nil {
			p.base = h.sum
			p.delta = pl.tree.known.deltaFor(h.sum.base, h.base, pl.tree)
		}
		p.journal = h.journal
		return p, nil
	case errors.Is(err, errNoManifest):
		if !errors.Is(err, fs.ErrNotExist) { // first push: nothing to say
			pl.warn(err.Error())
		}
		if h.newWorkdir {
			// Nothing of the tree there to compare (look).
			return p, pl.planFromStat(ctx, p, h.emptyView())
		}
		if pl.opts.Verify != VerifyNone {
			// Listed beside the plan: a first push into a fresh
			// workdir needs no stat of its own.
			view, err := h.listed()
			if err != nil {
				return nil, err
			}
			return p, pl.planFromStat(ctx, p, view)
		}
		return p, pl.planFromStat(ctx, p, nil)
	default:
		return nil, err
	}
}

// compare fills p from the host's manifest, once per manifest for a
// vouched one (the memo: every host holding it has the same changes). A
// manifest that does not read leaves p empty, and is errNoManifest.
func (pl *planner) compare(p *plan) error {
	h := pl.scan
	var perr error
	if h.vouched {
		var q plan
		q, perr = pl.tree.known.compare(h.sum.tree, func(q *plan) error { return planFromManifest(q, pl.tree, h.old) })
		p.send, p.meta, p.deletes, p.rmdirs, p.mkdirs, p.chdirs, p.unchange = q.send, q.meta, q.deletes, q.rmdirs, q.mkdirs, q.chdirs, q.unchange
	} else {
		perr = planFromManifest(p, pl.tree, h.old)
	}
	if perr != nil {
		*p = plan{hadTmp: p.hadTmp, madeTmp: p.madeTmp}
		return fmt.Errorf("%w: %s is unusable (%v); comparing by size and mtime instead and deleting nothing", errNoManifest, manifestName, perr)
	}
	return nil
}

// planFromManifest compares the tree t with the host's manifest (format 2,
// encoded) in one merge of the two sorted lists. An error means the
// manifest does not read, and p is then incomplete.
func planFromManifest(p *plan, t *Tree, old []byte) error {
	err := mergeTree(old, t,
		func(i int, o *lineEntry) {
			f := &t.Files[i]
			switch {
			case o == sameEntry:
				p.unchange++
			case o == nil || o.file.Pending || o.file.SHA256 != f.SHA256 || o.file.Size != f.Size:
				p.send = append(p.send, f)
			case o.file.Mode != f.Mode || o.file.MTime != f.ModTime.UnixNano():
				p.meta = append(p.meta, f)
			default:
				p.unchange++
			}
		},
		func(path string) {
			if !t.excluded(path, false) {
				p.deletes = append(p.deletes, path)
			}
		},
		func(i int, o *lineEntry) {
			switch d := t.Dirs[i]; {
			case o == nil:
				p.mkdirs = append(p.mkdirs, d)
			case o != sameEntry && (o.dir.Pending || o.dir.Mode != d.Mode):
				p.chdirs = append(p.chdirs, d)
			}
		},
		func(path string) {
			if !t.excluded(path, true) {
				p.rmdirs = append(p.rmdirs, path)
			}
		})
	// Deepest first, so a directory is empty (of pushed files) when its
	// turn comes.
	sort.Slice(p.rmdirs, func(i, j int) bool { return p.rmdirs[i] > p.rmdirs[j] })
	return err
}

// planFromStat compares by size, mtime (to the second, as SFTP keeps it)
// and mode, re-sending whenever unsure. Nothing is deleted: without a
// manifest push cannot tell its own files from the job's. view, when not
// nil, is the host's tree as listTree listed it (a nil info: not there);
// paths it lacks are looked at with Lstat.
func (pl *planner) planFromStat(ctx context.Context, p *plan, view hostView) error {
	files, dirs := pl.tree.Files, pl.tree.Dirs
	lstat := func(rel string) (fs.FileInfo, error) {
		if info, ok := view[rel]; ok {
			if info == nil {
				return nil, fs.ErrNotExist
			}
			return info, nil
		}
		return pl.fs.Lstat(pl.remote(rel))
	}
	verdict := make([]int, len(files)) // 0 send, 1 meta, 2 unchanged
	// The directories are looked at in the same round, for guard.
	dirInfo := make([]fs.FileInfo, len(dirs))
	err := forEach(ctx, len(files)+len(dirs), pl.opts.concurrency(), func(_ context.Context, i int) error {
		if i >= len(files) {
			dirInfo[i-len(files)], _ = lstat(dirs[i-len(files)].Path)
			return nil
		}
		f := &files[i]
		info, err := lstat(f.Path)
		if err != nil || !info.Mode().IsRegular() || info.Size() != f.Size ||
			info.ModTime().Unix() != f.ModTime.Unix() {
			return nil // send
		}
		if info.Mode().Perm() != f.Mode {
			verdict[i] = 1
		} else {
			verdict[i] = 2
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range files {
		switch verdict[i] {
		case 0:
			p.send = append(p.send, &files[i])
		case 1:
			p.meta = append(p.meta, &files[i])
		default:
			p.unchange++
		}
	}
	// MkdirAll is a no-op on existing directories; the mode is set anyway.
	p.mkdirs = append(p.mkdirs, pl.tree.Dirs...)
	p.view = make(hostView, len(dirs))
	for i, d := range dirs {
		p.view[d.Path] = dirInfo[i]
	}
	return nil
}

// journaled says whether commit puts a journal beside the manifest: when
// it changes files, directories or their modes. Every entry it then
// touches is pending in the journal, whatever manifest the host holds, so
// the new manifest may land while the tree changes (commit), not after.
// A first push (!p.known) writes one too, beside the whole pending
// manifest it starts with: that one owns the new files while they move
// (a file moved in but not listed would stay, unowned, once gone
// locally), the journal keeps them pending once the final manifest
// replaces it, one round trip sooner; and a journal left from an earlier
// push is replaced, not kept beside the new manifest.
func (p *plan) journaled() bool {
	return len(p.send)+len(p.meta)+len(p.chdirs)+len(p.mkdirs) > 0
}
