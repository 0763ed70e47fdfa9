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
	out = applySection(out, r.file, d.files, d.goneFiles, func(e lineEntry) manifestFile { return e.file }, appendFile)
	out = applySection(out, r.dir, d.dirs, d.goneDirs, func(e lineEntry) manifestDir { return e.dir }, appendDir)
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// applySection appends one section of a manifest (its entries from next,
// in order) with set's entries put in or over them and gone's left out.
func applySection[E any](out []byte, next func() (lineEntry, bool), set map[string]E, gone []string,
	entry func(lineEntry) E, appendEntry func([]byte, string, E) []byte) []byte {
	skip := make(map[string]bool, len(gone))
	for _, p := range gone {
		skip[p] = true
	}
	keys := sortedKeys(set)
	i := 0
	for e, ok := next(); ok; e, ok = next() {
		for ; i < len(keys) && keys[i] < e.path; i++ {
			out = appendEntry(out, keys[i], set[keys[i]])
		}
		switch {
		case i < len(keys) && keys[i] == e.path:
			out = appendEntry(out, keys[i], set[keys[i]])
			i++
		case !skip[e.path]:
			out = appendEntry(out, e.path, entry(e))
		}
	}
	for ; i < len(keys); i++ {
		out = appendEntry(out, keys[i], set[keys[i]])
	}
	return out
}

// peek returns the next line, not consumed; false at the end.
func (r *manifestReader) peek() (string, bool) {
	if r.err != nil || r.rest == "" {
		return "", false
	}
	line, _, ok := strings.Cut(r.rest, "\n")
	if !ok {
		r.err = fmt.Errorf("line %d: not terminated", r.n+1)
	}
	return line, ok
}

// take consumes the line peek returned, known to be the entry for path
// (identical to the tree's line for it).
func (r *manifestReader) take(path string) bool {
	_, r.rest, _ = strings.Cut(r.rest, "\n")
	r.n++
	return r.sorted(lineEntry{path: path})
}

// section is one half of a manifest, files or directories, and the tree's
// side of it.
type section struct {
	n      int                    // the tree's entries
	line   func(i int) string     // entry i encoded, as in a manifest
	path   func(i int) string     // entry i's path
	isMine func(line string) bool // a manifest line of this section
}

// sameEntry stands for the manifest's entry when its line is identical
// to the tree's: equal, and not parsed.
var sameEntry = &lineEntry{}

// merge walks one section of the manifest beside the tree's, both sorted
// by path. match is called for every tree entry with the manifest's entry
// for its path: sameEntry when the lines are identical (most: a line is
// compared, not parsed), nil when the manifest has none. gone is called
// for every manifest entry the tree lacks.
func (r *manifestReader) merge(sec section, match func(i int, old *lineEntry), gone func(path string)) {
	var cur lineEntry
	have := false // cur is parsed and not yet matched
	for i := 0; i < sec.n && r.err == nil; {
		if !have {
			raw, ok := r.peek()
			switch {
			case ok && raw == sec.line(i):
				if r.take(sec.path(i)) {
					match(i, sameEntry)
				}
				i++
				continue
			case ok && sec.isMine(raw):
				cur, have = r.next()
				if !have || !r.sorted(cur) {
					return
				}
			default: // the manifest's section is done
				match(i, nil)
				i++
				continue
			}
		}
		switch p := sec.path(i); {
		case cur.path < p:
			gone(cur.path)
			have = false
		case cur.path == p:
			match(i, &cur)
			have = false
			i++
		default:
			match(i, nil)
			i++
		}
	}
	if have {
		gone(cur.path)
	}
	for r.err == nil {
		raw, ok := r.peek()
		if !ok || !sec.isMine(raw) {
			break
		}
		if e, ok := r.next(); ok && r.sorted(e) {
			gone(e.path)
		}
	}
	r.dirs, r.started = true, false
}

// mergeTree walks the manifest old beside the tree: files, then
// directories (see merge). An error means the manifest does not read (or
// is out of order), and what was reported so far is incomplete.
func mergeTree(old []byte, t *Tree, file func(i int, old *lineEntry), goneFile func(string), dir func(i int, old *lineEntry), goneDir func(string)) error {
	r := newManifestReader(old)
	nf := len(t.Files)
	r.merge(section{
		n:      nf,
		line:   func(i int) string { return t.lines[i] },
		path:   func(i int) string { return t.Files[i].Path },
		isMine: func(l string) bool { return strings.HasPrefix(l, "f ") },
	}, file, goneFile)
	r.merge(section{
		n:      len(t.Dirs),
		line:   func(i int) string { return t.lines[nf+i] },
		path:   func(i int) string { return t.Dirs[i].Path },
		isMine: func(l string) bool { return strings.HasPrefix(l, "d ") || strings.HasPrefix(l, "D ") },
	}, dir, goneDir)
	if r.err == nil && r.rest != "" {
		if e, ok := r.next(); ok {
			r.err = fmt.Errorf("line %d: %s entry among the directories", r.n, e.kind)
		}
	}
	return r.err
}

// diffTree is the delta that makes base (format 2, its key baseKey) into
// the tree t, or nil when it would hold more than limit entries (then a
// whole manifest is the better write) or base does not read.
func diffTree(baseKey string, base []byte, t *Tree, limit int) *delta {
	d := &delta{base: baseKey, files: map[string]manifestFile{}, dirs: map[string]manifestDir{}}
	err := mergeTree(base, t,
		func(i int, old *lineEntry) {
			f := &t.Files[i]
			if want := fileEntry(f); old != sameEntry && (old == nil || old.file != want) {
				d.files[f.Path] = want
			}
		},
		func(p string) { d.goneFiles = append(d.goneFiles, p) },
		func(i int, old *lineEntry) {
			dir := t.Dirs[i]
			if want := (manifestDir{Mode: dir.Mode}); old != sameEntry && (old == nil || old.dir != want) {
				d.dirs[dir.Path] = want
			}
		},
		func(p string) { d.goneDirs = append(d.goneDirs, p) })
	if err != nil || d.size() > limit {
		return nil
	}
	return d
}
