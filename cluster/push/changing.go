package push

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Files that change while pushed: a log kept in the code directory
// (`drover run job.toml 2>&1 | tee run.log` with code = "."), a file a
// local job writes. The scan reads such a file again a few times
// (steadyTries); one still changing is copied once, at one moment, to a
// snapshot that every host then gets (snapshotMax), or, too large to copy,
// left out of the push and alone on the hosts, as an excluded file is. A
// file that was steady at the scan and changes before its upload fails
// that host's Sync with a *ChangedError (what was sent is not what was
// hashed, so nothing moved into place); SyncSteady then pushes again with
// a snapshot of it. Either way the push goes on, and Tree.Changing and
// Result.Changing name the file, for one warning that says how to exclude
// it.

// steadyTries is how many times the scan reads a file that changes under
// it before it stops waiting for the file to hold still: a file saved by
// an editor holds still a few milliseconds later, a log written every
// line never does.
const steadyTries = 3

// snapshotMax is the largest file the push copies to a snapshot when it
// keeps changing (Options.snapMax in tests): a log is usually far smaller;
// a larger file is skipped rather than doubled on the local disk.
const snapshotMax = 64 << 20

// maxResyncs bounds SyncSteady: each round takes one more file as a
// snapshot, which cannot change again, so it ends by itself; the bound
// only keeps a tree of many changing files from pushing for ever.
const maxResyncs = 8

// Changing is a file that kept changing while the push read it: what the
// hosts got instead of it. Warning says so, with the fix.
type Changing struct {
	// Path is the file's path in the code directory.
	Path string
	// Size is the snapshot's size, or the file's when it was skipped.
	Size int64
	// Skipped says why the file was not pushed at all (the hosts keep
	// what they had); "" when a snapshot of it was.
	Skipped string
}

// Warning is the one line the user reads about c: what happened and how
// to stop it (a file written while drover runs is rarely code).
func (c Changing) Warning() string {
	fix := fmt.Sprintf("if it is written while drover runs (a log), exclude it: exclude = [%q] in the job file, or a line %q in %s",
		"/"+c.Path, "/"+c.Path, IgnoreFile)
	if c.Skipped != "" {
		return fmt.Sprintf("%s kept changing while it was pushed and was not pushed (%s); %s", c.Path, c.Skipped, fix)
	}
	return fmt.Sprintf("%s kept changing while it was pushed: the hosts got a snapshot of it (%s); %s", c.Path, FormatBytes(c.Size), fix)
}

// ChangedError is a file that changed between the scan and its upload:
// what was sent is not what the scan hashed, so the host's push stopped
// before anything moved into place (the host keeps its previous tree).
// SyncSteady pushes again with a snapshot of the file.
type ChangedError struct {
	Path string
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("upload %s: the file changed while it was being pushed; if it is written while drover runs (a log), exclude it (job.exclude or %s)", e.Path, IgnoreFile)
}

// changeAction is what the scan does after a read of a file that changed
// under it.
type changeAction int

const (
	readAgain    changeAction = iota // wait a moment and read it again
	takeSnapshot                     // copy it once and push the copy
	skipFile                         // leave it out, and alone on the hosts
)

// onChange decides what follows the tries-th read (from 1) that saw a
// file of size bytes change: a few reads again, then a snapshot if it
// is at most max bytes, else skipping it.
func onChange(tries int, size, max int64) changeAction {
	switch {
	case tries < steadyTries:
		return readAgain
	case size <= max:
		return takeSnapshot
	default:
		return skipFile
	}
}

// readSteady sets f's digest, size, mode and mtime from a read during
// which the file held still, reading again (onChange) while it does not.
// A file that never holds still becomes a snapshot (f.snap) or is to be
// skipped: ch says which, nil for a steady file. hook is a test's (it runs
// during each read).
func readSteady(f *File, buf []byte, max int64, hook func(string)) (ch *Changing, err error) {
	for tries := 1; ; tries++ {
		steady, err := hashOnce(f, buf, hook)
		if err != nil || steady {
			return nil, err
		}
		switch onChange(tries, f.Size, max) {
		case readAgain:
			time.Sleep(time.Duration(tries) * 10 * time.Millisecond)
		case takeSnapshot:
			c := copySnapshot(f, buf, max)
			return &c, nil
		default:
			return &Changing{Path: f.Path, Size: f.Size, Skipped: "larger than the " + FormatBytes(max) + " drover copies to a snapshot"}, nil
		}
	}
}

// hashOnce reads f once for its digest and reports whether the file held
// still meanwhile: its stat before and after the read agree, and the read
// got the size the first stat saw. f's size, mode and mtime become those
// of the first stat, which the upload checks the file against again.
func hashOnce(f *File, buf []byte, hook func(string)) (steady bool, err error) {
	r, err := os.Open(f.src)
	if err != nil {
		if cluster.IsTooManyOpenFiles(err) {
			return false, cluster.NameOpenFiles("hash "+f.Path, err)
		}
		return false, fmt.Errorf("hash %s: %w", f.Path, err)
	}
	defer r.Close()
	before, err := r.Stat()
	if err != nil {
		return false, fmt.Errorf("hash %s: %w", f.Path, err)
	}
	h := sha256.New()
	// struct{io.Reader} hides os.File's WriterTo, which would bring its
	// own buffer instead of this one.
	n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, buf)
	if err != nil {
		return false, fmt.Errorf("hash %s: %w", f.Path, err)
	}
	if hook != nil {
		hook(f.Path)
	}
	after, err := r.Stat()
	if err != nil {
		return false, fmt.Errorf("hash %s: %w", f.Path, err)
	}
	f.Size, f.SHA256 = n, hex.EncodeToString(h.Sum(nil))
	f.Mode, f.ModTime, f.id = before.Mode().Perm(), before.ModTime(), fileStatID(before)
	return n == before.Size() && sameStat(before, after), nil
}

// sameStat reports whether two stats of one open file show no change.
func sameStat(a, b fs.FileInfo) bool {
	return a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) && fileStatID(a) == fileStatID(b)
}

// copySnapshot copies f, at most max bytes of it, to an unlinked temporary
// file that every host's upload then reads (f.snap): the copy is what
// the file held at one moment and cannot change. It is freed with the
// last tree that holds it (the garbage collector closes it). When no copy
// can be made, or the file grew past max while copied, f is to be
// skipped, and the Changing says why.
func copySnapshot(f *File, buf []byte, max int64) Changing {
	skip := func(why string) Changing { return Changing{Path: f.Path, Size: f.Size, Skipped: why} }
	src, err := os.Open(f.src)
	if err != nil {
		return skip(fmt.Sprintf("it could not be read again: %v", err))
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return skip(fmt.Sprintf("it could not be read again: %v", err))
	}
	tmp, err := os.CreateTemp("", "drover-snapshot-*")
	if err != nil {
		return skip(fmt.Sprintf("no snapshot could be written: %v", err))
	}
	_ = os.Remove(tmp.Name()) // open, it lives on; closed, it is gone
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(tmp, h), io.LimitReader(struct{ io.Reader }{src}, max+1), buf)
	switch {
	case err != nil:
		tmp.Close()
		return skip(fmt.Sprintf("no snapshot could be written: %v", err))
	case n > max:
		tmp.Close()
		return skip("it grew past the " + FormatBytes(max) + " drover copies to a snapshot")
	}
	f.Size, f.SHA256, f.Mode, f.ModTime = n, hex.EncodeToString(h.Sum(nil)), st.Mode().Perm(), st.ModTime()
	f.snap, f.id = tmp, statID{} // never cached: the digest is the copy's
	return Changing{Path: f.Path, Size: n}
}

// steadyFiles fills in the digest of every file that has none yet (the
// digest cache gave the others) with a few workers, since hashing is
// CPU-bound, and returns the files that kept changing (readSteady), sorted
// by path. Each read goes through a pooled buffer: a fresh one per file made
// allocating and zeroing buffers (750 MB for a 3,000-file tree) cost more
// than the hashing.
func steadyFiles(files []File, workers int, max int64, hook func(string)) ([]Changing, error) {
	bufs := sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
	var mu sync.Mutex
	var changing []Changing
	err := forEach(context.Background(), len(files), workers, func(_ context.Context, i int) error {
		f := &files[i]
		if f.SHA256 != "" {
			return nil
		}
		buf := bufs.Get().(*[]byte)
		defer bufs.Put(buf)
		ch, err := readSteady(f, *buf, max, hook)
		if ch != nil {
			mu.Lock()
			changing = append(changing, *ch)
			mu.Unlock()
		}
		return err
	})
	sort.Slice(changing, func(i, j int) bool { return changing[i].Path < changing[j].Path })
	return changing, err
}

// leaveOut removes the skipped files of changing from t.Files and marks
// them left alone on the hosts (Tree.excluded), as excluded files are: a
// push must not delete a host's copy of a file it could not read whole.
func (t *Tree) leaveOut(changing []Changing) {
	for _, c := range changing {
		if c.Skipped == "" {
			continue
		}
		t.left[c.Path] = true
		i := sort.Search(len(t.Files), func(i int) bool { return t.Files[i].Path >= c.Path })
		if i < len(t.Files) && t.Files[i].Path == c.Path {
			t.Files = append(t.Files[:i:i], t.Files[i+1:]...)
		}
	}
}

// withSnapshot is t with the file rel taken as a snapshot now (or skipped,
// too large to copy): the tree a host's push is done again with after the
// file changed under its upload (SyncSteady). Every host that meets the
// same change shares the one derived tree, so they all get the same
// snapshot.
func (t *Tree) withSnapshot(rel string) (*Tree, Changing) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d, ok := t.derived[rel]; ok {
		return d.tree, d.ch
	}
	nt := &Tree{Dir: t.Dir, Dirs: t.Dirs, Warnings: t.Warnings, match: t.match, fresh: t.fresh, open: t.open,
		snapMax: t.snapMax, left: make(map[string]bool, len(t.left)+1), derived: map[string]derived{}}
	for p := range t.left {
		nt.left[p] = true
	}
	nt.Files = append([]File(nil), t.Files...)
	i := sort.Search(len(nt.Files), func(i int) bool { return nt.Files[i].Path >= rel })
	ch := Changing{Path: rel, Skipped: "it is no longer in the code directory"}
	if i < len(nt.Files) && nt.Files[i].Path == rel {
		ch = copySnapshot(&nt.Files[i], make([]byte, 256<<10), t.snapMax)
	}
	nt.Changing = append(append([]Changing(nil), t.Changing...), ch)
	nt.leaveOut([]Changing{ch})
	for _, f := range nt.Files {
		nt.Bytes += f.Size
	}
	nt.encode()
	// A memo of its own: the one of t holds plans made for t's files.
	cacheDir := ""
	if t.known != nil {
		cacheDir = t.known.cacheDir
	}
	nt.known = newManifestMemo(cacheDir)
	nt.known.store(nt.key, nt.manifest)
	if t.derived == nil { // a Tree not made by ScanLocal
		t.derived = map[string]derived{}
	}
	t.derived[rel] = derived{tree: nt, ch: ch}
	return nt, ch
}

// derived is a tree made from another by withSnapshot.
type derived struct {
	tree *Tree
	ch   Changing
}

// SyncSteady is Sync that does not fail on a file that changes while it
// is pushed: when one changed between the scan and its upload (a
// *ChangedError, the host keeping its previous tree), it pushes again
// with a snapshot of that file (withSnapshot), a few times at most.
// Result.Changing names the files it took as snapshots or skipped (those
// the scan did are in tree.Changing); Result.Tree is the tree the host
// now holds, tree itself unless a file changed.
func SyncSteady(ctx context.Context, fsys cluster.FS, hostLabel string, tree *Tree, remoteDir string, opts Options) (Result, error) {
	var changing []Changing
	for round := 0; ; round++ {
		res, err := Sync(ctx, fsys, hostLabel, tree, remoteDir, opts)
		res.Changing, res.Tree = changing, tree
		var ce *ChangedError
		if !errors.As(err, &ce) || round == maxResyncs || ctx.Err() != nil {
			return res, err
		}
		next, ch := tree.withSnapshot(ce.Path)
		changing = append(changing, ch)
		tree = next
	}
}
