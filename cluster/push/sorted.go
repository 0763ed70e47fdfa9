package push

import (
	"errors"
	"fmt"
	"strings"
)

// A manifest of format 2 lists its files and then its directories, each
// sorted by path, the order of a Tree's. The fast path of a push therefore
// never builds a map of the host's 3,000 entries: it walks the encoded
// manifest beside the tree (a merge), which made planning a one-file push
// cost a fraction of decoding the manifest into maps.

// manifestReader walks the entries of a whole manifest (format 2) in
// order, checking each line and that paths strictly increase, so that a
// merge can trust the order. Once an error is set, it reads nothing more.
type manifestReader struct {
	rest    string
	n       int // line number of the last line read
	err     error
	dirs    bool   // the files are done
	prev    string // last path returned in this section
	started bool
}

func newManifestReader(data []byte) *manifestReader {
	header, rest, ok := strings.Cut(string(data), "\n")
	r := &manifestReader{rest: rest, n: 1}
	if !ok || header != manifestHeader {
		r.err = fmt.Errorf("bad header %q", header)
	}
	return r
}

func (r *manifestReader) next() (lineEntry, bool) {
	if r.err != nil || r.rest == "" {
		return lineEntry{}, false
	}
	line, rest, ok := strings.Cut(r.rest, "\n")
	if !ok {
		r.err = fmt.Errorf("line %d: not terminated", r.n+1)
		return lineEntry{}, false
	}
	e, err := parseEntry(line)
	if err != nil {
		r.err = fmt.Errorf("line %d: %w", r.n+1, err)
		return lineEntry{}, false
	}
	r.rest, r.n = rest, r.n+1
	return e, true
}

// sorted records e's path, failing unless it follows the last one.
func (r *manifestReader) sorted(e lineEntry) bool {
	if r.started && e.path <= r.prev {
		r.err = fmt.Errorf("line %d: %q out of order", r.n, e.path)
		return false
	}
	r.prev, r.started = e.path, true
	return true
}

// file returns the next file entry; false once the files are done (or on
// an error, see err).
func (r *manifestReader) file() (lineEntry, bool) {
	if r.dirs {
		return lineEntry{}, false
	}
	rest, n := r.rest, r.n
	e, ok := r.next()
	if ok && e.kind != "f" {
		// The first directory: read again by dir.
		r.rest, r.n, ok = rest, n, false
	}
	if !ok {
		r.dirs, r.started = true, false
		return lineEntry{}, false
	}
	return e, r.sorted(e)
}

// dir returns the next directory entry, once the files are done.
func (r *manifestReader) dir() (lineEntry, bool) {
	if r.err != nil {
		return lineEntry{}, false
	}
	if !r.dirs {
		r.err = errors.New("directories read before files")
		return lineEntry{}, false
	}
	e, ok := r.next()
	if ok && e.kind != "d" {
		r.err = fmt.Errorf("line %d: %s entry among the directories", r.n, e.kind)
		return lineEntry{}, false
	}
	return e, ok && r.sorted(e)
}

// applyDelta returns the encoding of base (format 2) with d's changes:
// the manifest of a host holding base and d.
func applyDelta(base []byte, d *delta) ([]byte, error) {
	r := newManifestReader(base)
	out := make([]byte, 0, len(base)+d.size()*128)
	out = append(out, manifestHeader+"\n"...)
	goneF := make(map[string]bool, len(d.goneFiles))
	for _, p := range d.goneFiles {
		goneF[p] = true
	}
	set := sortedKeys(d.files)
	i := 0
	for e, ok := r.file(); ok; e, ok = r.file() {
		for ; i < len(set) && set[i] < e.path; i++ {
			out = appendFile(out, set[i], d.files[set[i]])
		}
		switch {
		case i < len(set) && set[i] == e.path:
			out = appendFile(out, set[i], d.files[set[i]])
			i++
		case !goneF[e.path]:
			out = appendFile(out, e.path, e.file)
		}
	}
	for ; i < len(set); i++ {
		out = appendFile(out, set[i], d.files[set[i]])
	}
	goneD := make(map[string]bool, len(d.goneDirs))
	for _, p := range d.goneDirs {
		goneD[p] = true
	}
	setD := sortedKeys(d.dirs)
	i = 0
	for e, ok := r.dir(); ok; e, ok = r.dir() {
		for ; i < len(setD) && setD[i] < e.path; i++ {
			out = appendDir(out, setD[i], d.dirs[setD[i]])
		}
		switch {
		case i < len(setD) && setD[i] == e.path:
			out = appendDir(out, setD[i], d.dirs[setD[i]])
			i++
		case !goneD[e.path]:
			out = appendDir(out, e.path, e.dir)
		}
	}
	for ; i < len(setD); i++ {
		out = appendDir(out, setD[i], d.dirs[setD[i]])
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// diffTree is the delta that makes base (format 2, its key baseKey) into
// the tree t, or nil when it would hold more than limit entries (then a
// whole manifest is the better write) or base does not read.
func diffTree(baseKey string, base []byte, t *Tree, limit int) *delta {
	d := &delta{base: baseKey, files: map[string]manifestFile{}, dirs: map[string]manifestDir{}}
	r := newManifestReader(base)
	e, ok := r.file()
	for i := range t.Files {
		f := &t.Files[i]
		for ; ok && e.path < f.Path; e, ok = r.file() {
			d.goneFiles = append(d.goneFiles, e.path)
		}
		want := fileEntry(f)
		if ok && e.path == f.Path {
			if e.file != want {
				d.files[f.Path] = want
			}
			e, ok = r.file()
		} else {
			d.files[f.Path] = want
		}
		if d.size() > limit {
			return nil
		}
	}
	for ; ok; e, ok = r.file() {
		d.goneFiles = append(d.goneFiles, e.path)
	}
	e, ok = r.dir()
	for _, dir := range t.Dirs {
		for ; ok && e.path < dir.Path; e, ok = r.dir() {
			d.goneDirs = append(d.goneDirs, e.path)
		}
		want := manifestDir{Mode: dir.Mode}
		if ok && e.path == dir.Path {
			if e.dir != want {
				d.dirs[dir.Path] = want
			}
			e, ok = r.dir()
		} else {
			d.dirs[dir.Path] = want
		}
	}
	for ; ok; e, ok = r.dir() {
		d.goneDirs = append(d.goneDirs, e.path)
	}
	if r.err != nil || d.size() > limit {
		return nil
	}
	return d
}
