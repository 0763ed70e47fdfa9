package push

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Verify says how much a push checks of what a host holds before it
// trusts the host's manifest.
type Verify int

const (
	// VerifyNone trusts the manifest: a push with nothing to do reads
	// one link per host (`drover push`).
	VerifyNone Verify = iota
	// VerifyStat lists every directory of the tree on the host (one
	// request per directory) and sends again every file that is gone,
	// not a regular file, or differs in size or mtime (to the second), as
	// rsync's quick check does: what `drover run` does before each
	// attempt, so that a file edited or deleted on a host is repaired
	// rather than failing every attempt.
	VerifyStat
	// VerifyContent also reads back every file that passed VerifyStat and
	// compares its SHA-256 (`drover push --verify`): the whole tree
	// crosses the network once more.
	VerifyContent
)

// hostView is what a host holds at some paths of the tree, as Lstat sees
// them: a nil info is a path that does not exist (or cannot be read).
type hostView map[string]fs.FileInfo

// hasFile reports whether rel is a file of the tree.
func (t *Tree) hasFile(rel string) bool {
	i := sort.Search(len(t.Files), func(i int) bool { return t.Files[i].Path >= rel })
	return i < len(t.Files) && t.Files[i].Path == rel
}

func isLink(info fs.FileInfo) bool { return info != nil && info.Mode()&fs.ModeSymlink != 0 }

// under reports whether rel is root or below it.
func under(rel, root string) bool {
	return rel == root || strings.HasPrefix(rel, root+"/")
}

// underAny reports whether rel is one of roots or below one of them.
func underAny(rel string, roots []string) bool {
	for _, r := range roots {
		if under(rel, r) {
			return true
		}
	}
	return false
}

// guard makes sure a push never writes or deletes through a symbolic
// link it did not create, and (with Options.Verify) that what the host
// holds is what its manifest says, before anything is uploaded. It looks
// at the directories above every path the plan touches (and, verifying,
// at the whole tree), then rewrites the plan:
//   - a directory of the tree that is a link on the host (say data ->
//     ~/dataset) is replaced, as rsync does: commit removes the link (never
//     its target) and the directory is pushed whole in its place;
//   - a link above a path that is gone locally is left alone with
//     everything behind it: nothing is deleted through it;
//   - a file whose mode or mtime alone changed but that is not a regular
//     file on the host is sent (renamed over the link) rather than changed
//     in place, which would change the link's target;
//   - verifying, a file that drifted is sent again, a missing directory
//     created.
//
// Verifying, it reads the host's tree as listTree lists it: the scan
// starts the listing beside the plan (it needs none of the plan), so that a
// restart's check costs the longer of the two rather than their sum.
func (pl *planner) guard(ctx context.Context, p *plan) error {
	view := hostView{}
	for rel, info := range p.view {
		view[rel] = info
	}
	if pl.opts.Verify != VerifyNone {
		listed, err := pl.scan.listed()
		if err != nil {
			return err
		}
		for rel, info := range listed {
			view[rel] = info
		}
	}
	if err := pl.lstatMissing(ctx, view, guardPaths(p)); err != nil {
		return err
	}
	treeDir := make(map[string]bool, len(pl.tree.Dirs))
	for _, d := range pl.tree.Dirs {
		treeDir[d.Path] = true
	}
	var replace, foreign []string
	for _, rel := range sortedKeys(view) {
		if !isLink(view[rel]) || underAny(rel, replace) || underAny(rel, foreign) {
			continue
		}
		if treeDir[rel] {
			replace = append(replace, rel)
		} else if !pl.tree.hasFile(rel) {
			foreign = append(foreign, rel)
		}
	}
	resend := map[string]bool{}
	for _, f := range p.meta {
		if info, ok := view[f.Path]; ok && (info == nil || !info.Mode().IsRegular()) {
			resend[f.Path] = true
		}
	}
	if pl.opts.Verify != VerifyNone {
		if err := pl.drift(ctx, p, view, resend); err != nil {
			return err
		}
	}
	if len(replace)+len(foreign)+len(resend) == 0 && !pl.missingDirs(view) {
		return nil
	}
	pl.rewrite(p, view, replace, foreign, resend)
	return nil
}

// guardPaths are the paths whose type on the host decides what a push
// may do: every directory above a path it writes or deletes, the
// directories it creates, changes or removes, and the files whose mode
// or mtime it sets in place.
func guardPaths(p *plan) []string {
	seen := map[string]bool{}
	add := func(rel string, self bool) {
		if self {
			seen[rel] = true
		}
		for d := path.Dir(rel); d != "."; d = path.Dir(d) {
			seen[d] = true
		}
	}
	for _, f := range p.send {
		add(f.Path, false)
	}
	for _, f := range p.meta {
		add(f.Path, true)
	}
	for _, rel := range p.deletes {
		add(rel, false)
	}
	for _, rel := range p.rmdirs {
		add(rel, true)
	}
	for _, d := range p.mkdirs {
		add(d.Path, true)
	}
	for _, d := range p.chdirs {
		add(d.Path, true)
	}
	return sortedKeys(seen)
}

// lstatMissing fills in view the paths it does not hold yet, in
// parallel. An error is taken as "not there": a parent that is a file
// or unreadable fails the writes below it anyway, with their own error.
func (pl *planner) lstatMissing(ctx context.Context, view hostView, paths []string) error {
	var todo []string
	for _, rel := range paths {
		if _, ok := view[rel]; !ok {
			todo = append(todo, rel)
		}
	}
	infos := make([]fs.FileInfo, len(todo))
	err := forEach(ctx, len(todo), pl.opts.concurrency(), func(_ context.Context, i int) error {
		infos[i], _ = pl.fs.Lstat(pl.remote(todo[i]))
		return nil
	})
	for i, rel := range todo {
		view[rel] = infos[i]
	}
	return err
}

// drift adds to resend the files the plan leaves alone that differ on
// the host from what was pushed (VerifyStat: gone, not a regular file,
// other size or mtime; VerifyContent: other SHA-256 besides), and puts
// those whose mode alone differs in p.meta.
func (pl *planner) drift(ctx context.Context, p *plan, view hostView, resend map[string]bool) error {
	planned := make(map[string]bool, len(p.send)+len(p.meta))
	for _, f := range p.send {
		planned[f.Path] = true
	}
	for _, f := range p.meta {
		planned[f.Path] = true
	}
	var same []*File
	var meta []*File
	for i := range pl.tree.Files {
		f := &pl.tree.Files[i]
		if planned[f.Path] {
			continue
		}
		switch info := view[f.Path]; {
		case info == nil || !info.Mode().IsRegular() || info.Size() != f.Size || info.ModTime().Unix() != f.ModTime.Unix():
			resend[f.Path] = true
		case info.Mode().Perm() != f.Mode:
			meta = append(meta, f)
		default:
			same = append(same, f)
		}
	}
	if len(meta) > 0 {
		p.meta = append(append([]*File(nil), p.meta...), meta...)
		p.unchange -= len(meta)
	}
	if pl.opts.Verify < VerifyContent {
		return nil
	}
	differs := make([]bool, len(same))
	err := forEach(ctx, len(same), pl.opts.concurrency(), func(_ context.Context, i int) error {
		sum, err := pl.remoteSHA256(same[i].Path)
		if err != nil {
			return fileErr("verify", same[i].Path, err)
		}
		differs[i] = sum != same[i].SHA256
		return nil
	})
	for i, f := range same {
		if differs[i] {
			resend[f.Path] = true
		}
	}
	return err
}

// remoteSHA256 reads rel back from the host and hashes it.
func (pl *planner) remoteSHA256(rel string) (string, error) {
	r, err := pl.fs.Open(pl.remote(rel))
	if err != nil {
		return "", err
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// missingDirs reports whether a directory of the tree the plan does not
// create is known to be gone from the host.
func (pl *planner) missingDirs(view hostView) bool {
	if pl.opts.Verify == VerifyNone {
		return false
	}
	for _, d := range pl.tree.Dirs {
		if info, ok := view[d.Path]; ok && info == nil {
			return true
		}
	}
	return false
}

// rewrite applies guard's findings to p, building new slices: p's may be
// shared with other hosts' plans (manifestMemo.compare).
func (pl *planner) rewrite(p *plan, view hostView, replace, foreign []string, resend map[string]bool) {
	p.unlink = replace
	send := make(map[string]bool, len(p.send)+len(resend))
	for _, f := range p.send {
		send[f.Path] = true
	}
	for rel := range resend {
		send[rel] = true
	}
	p.send = p.send[:0:0]
	for i := range pl.tree.Files {
		f := &pl.tree.Files[i]
		if send[f.Path] || underAny(f.Path, replace) {
			p.send = append(p.send, f)
		}
	}
	p.meta = filterFiles(p.meta, func(f *File) bool { return !send[f.Path] && !underAny(f.Path, replace) })
	p.unchange = len(pl.tree.Files) - len(p.send) - len(p.meta)

	mk := make(map[string]bool, len(p.mkdirs))
	for _, d := range p.mkdirs {
		mk[d.Path] = true
	}
	p.mkdirs = p.mkdirs[:0:0]
	for _, d := range pl.tree.Dirs {
		info, known := view[d.Path]
		if mk[d.Path] || underAny(d.Path, replace) || (known && info == nil && pl.opts.Verify != VerifyNone) {
			p.mkdirs = append(p.mkdirs, d)
		}
	}
	sort.Slice(p.mkdirs, func(i, j int) bool { return p.mkdirs[i].Path < p.mkdirs[j].Path })
	p.chdirs = filterDirs(p.chdirs, func(d Dir) bool { return !underAny(d.Path, replace) })
	gone := append(append([]string(nil), replace...), foreign...)
	p.deletes = filterPaths(p.deletes, func(rel string) bool { return !underAny(rel, gone) })
	p.rmdirs = filterPaths(p.rmdirs, func(rel string) bool { return !underAny(rel, gone) && !isLink(view[rel]) })
	if len(foreign) > 0 {
		pl.warn(fmt.Sprintf("%s is a symbolic link on the host, not the directory pushed there; left alone with what it points to", strings.Join(foreign, ", ")))
	}
}

func filterFiles(in []*File, keep func(*File) bool) []*File {
	var out []*File
	for _, f := range in {
		if keep(f) {
			out = append(out, f)
		}
	}
	return out
}

func filterDirs(in []Dir, keep func(Dir) bool) []Dir {
	var out []Dir
	for _, d := range in {
		if keep(d) {
			out = append(out, d)
		}
	}
	return out
}

func filterPaths(in []string, keep func(string) bool) []string {
	var out []string
	for _, rel := range in {
		if keep(rel) {
			out = append(out, rel)
		}
	}
	return out
}
