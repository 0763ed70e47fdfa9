package push

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomTree makes a tree of n files in a few directories, with names
// that sort in tricky ways (a prefix of another, a space, a dot).
func randomTree(r *rand.Rand, n int) *Tree {
	t := &Tree{}
	dirs := map[string]bool{}
	names := map[string]bool{}
	for len(names) < n {
		dir := []string{"", "a", "a/b", "a b", "a.b", "ab"}[r.IntN(6)]
		name := fmt.Sprintf("f%d", r.IntN(4*n))
		if dir != "" {
			name = dir + "/" + name
			for d := dir; d != "."; d = pathDir(d) {
				dirs[d] = true
			}
		}
		names[name] = true
	}
	for name := range names {
		t.Files = append(t.Files, File{Path: name, Size: int64(r.IntN(100)), Mode: 0o644,
			ModTime: time.Unix(0, r.Int64N(1e18)), SHA256: fmt.Sprintf("%064x", r.Uint64())})
	}
	for d := range dirs {
		t.Dirs = append(t.Dirs, Dir{Path: d, Mode: 0o755})
	}
	sortTree(t)
	return t
}

func pathDir(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[:i]
	}
	return "."
}

func sortTree(t *Tree) {
	sort.Slice(t.Files, func(i, j int) bool { return t.Files[i].Path < t.Files[j].Path })
	sort.Slice(t.Dirs, func(i, j int) bool { return t.Dirs[i].Path < t.Dirs[j].Path })
	t.encode()
}

// mutate changes, removes and adds some files and directory modes.
func mutate(r *rand.Rand, t *Tree) *Tree {
	out := &Tree{}
	for _, f := range t.Files {
		switch r.IntN(8) {
		case 0: // removed
			continue
		case 1:
			f.SHA256, f.Size = fmt.Sprintf("%064x", r.Uint64()), f.Size+1
		case 2:
			f.Mode = 0o755
		case 3:
			f.ModTime = f.ModTime.Add(time.Second)
		}
		out.Files = append(out.Files, f)
	}
	for i := range r.IntN(5) {
		out.Files = append(out.Files, File{Path: fmt.Sprintf("a/new%d", i), Size: 1, Mode: 0o600, SHA256: fmt.Sprintf("%064x", i)})
	}
	for _, d := range t.Dirs {
		if d.Path == "a" || r.IntN(4) != 0 {
			if r.IntN(4) == 0 {
				d.Mode = 0o700
			}
			out.Dirs = append(out.Dirs, d)
		}
	}
	if r.IntN(2) == 0 {
		out.Dirs = append(out.Dirs, Dir{Path: "zz", Mode: 0o755})
	}
	sortTree(out)
	return out
}

// TestMergesAgreeWithMaps: the merges of the fast path (diffTree,
// applyDelta, planFromManifest) give what the same comparisons over maps
// give, for random trees and changes.
func TestMergesAgreeWithMaps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		old := randomTree(r, 1+r.IntN(40))
		tree := mutate(r, old)
		oldData := encodeTree(old)
		if i%4 == 0 {
			// Not as drover writes them (octal modes with a leading 0):
			// the lines differ from the tree's, the entries do not.
			oldData = []byte(strings.ReplaceAll(string(oldData), " 644 ", " 0644 "))
		}
		key := stateKey(oldData)

		d := diffTree(key, oldData, tree, 1<<20)
		require.NotNil(t, d)
		got, err := applyDelta(oldData, d)
		require.NoError(t, err)
		require.Equal(t, string(encodeTree(tree)), strings.ReplaceAll(string(got), " 0644 ", " 644 "), "case %d: base + delta is the tree", i)
		oldM, err := decodeManifest(oldData)
		require.NoError(t, err)
		require.Equal(t, string(encodeTree(tree)), string(encodeManifest(applyOverMaps(oldM, d))), "case %d: the same over maps", i)
		round, err := decodeDelta(encodeDelta(d))
		require.NoError(t, err)
		require.Equal(t, d, round)
		if n := d.size(); n > 0 {
			assert.Nil(t, diffTree(key, oldData, tree, n-1), "case %d: over the limit", i)
		}

		p := &plan{}
		require.NoError(t, planFromManifest(p, tree, oldData))
		var send, meta, deletes, mkdirs, chdirs, rmdirs []string
		newFiles := map[string]bool{}
		for _, f := range tree.Files {
			newFiles[f.Path] = true
			o, ok := oldM.Files[f.Path]
			switch {
			case !ok || o.SHA256 != f.SHA256 || o.Size != f.Size:
				send = append(send, f.Path)
			case o.Mode != f.Mode || o.MTime != f.ModTime.UnixNano():
				meta = append(meta, f.Path)
			}
		}
		for _, p := range sortedKeys(oldM.Files) {
			if !newFiles[p] {
				deletes = append(deletes, p)
			}
		}
		newDirs := map[string]bool{}
		for _, dir := range tree.Dirs {
			newDirs[dir.Path] = true
			o, ok := oldM.Dirs[dir.Path]
			switch {
			case !ok:
				mkdirs = append(mkdirs, dir.Path)
			case o.Mode != dir.Mode:
				chdirs = append(chdirs, dir.Path)
			}
		}
		for _, p := range sortedKeys(oldM.Dirs) {
			if !newDirs[p] {
				rmdirs = append([]string{p}, rmdirs...)
			}
		}
		paths := func(fs []*File) (out []string) {
			for _, f := range fs {
				out = append(out, f.Path)
			}
			return out
		}
		dirPaths := func(ds []Dir) (out []string) {
			for _, d := range ds {
				out = append(out, d.Path)
			}
			return out
		}
		assert.Equal(t, send, paths(p.send), "case %d: send", i)
		assert.Equal(t, meta, paths(p.meta), "case %d: meta", i)
		assert.Equal(t, deletes, p.deletes, "case %d: deletes", i)
		assert.Equal(t, mkdirs, dirPaths(p.mkdirs), "case %d: mkdirs", i)
		assert.Equal(t, chdirs, dirPaths(p.chdirs), "case %d: chdirs", i)
		assert.Equal(t, rmdirs, p.rmdirs, "case %d: rmdirs", i)
		assert.Equal(t, len(tree.Files)-len(send)-len(meta), p.unchange, "case %d: unchanged", i)
	}
}

// TestMergeRefusesDisorder: a merge trusts the order of the manifest's
// lines, so a manifest out of order (hand-edited, or tampered together
// with its sum) is refused rather than misread.
func TestMergeRefusesDisorder(t *testing.T) {
	h := manifestHeader + "\n"
	f := func(p string) string { return "f " + sha + " 1 644 0 \"" + p + "\"\n" }
	dir := func(p string) string { return "d 755 \"" + p + "\"\n" }
	for _, tc := range []struct{ name, data, want string }{
		{"files out of order", h + f("b") + f("a"), "out of order"},
		{"file twice", h + f("a") + f("a"), "out of order"},
		{"dirs out of order", h + dir("b") + dir("a"), "out of order"},
		{"file after the dirs", h + dir("a") + f("b"), "f entry among the directories"},
		{"a removal", h + f("a") + "-f \"b\"\n", "-f entry among the directories"},
		{"a delta", manifestHeader + " delta " + sha + "\n", "bad header"},
		{"bad line", h + f("a") + "x\n", "unknown entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := &Tree{Files: []File{{Path: "a"}}, Dirs: []Dir{{Path: "a"}}}
			tree.encode()
			err := planFromManifest(&plan{}, tree, []byte(tc.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, diffTree(sha, []byte(tc.data), tree, 1<<20))
			_, err = applyDelta([]byte(tc.data), &delta{})
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// applyOverMaps is what applyDelta does, the plain way: the reference the
// merge is checked against.
func applyOverMaps(base *manifest, d *delta) *manifest {
	m := newManifest()
	for p, f := range base.Files {
		m.Files[p] = f
	}
	for p, e := range base.Dirs {
		m.Dirs[p] = e
	}
	for p, f := range d.files {
		m.Files[p] = f
	}
	for p, e := range d.dirs {
		m.Dirs[p] = e
	}
	for _, p := range d.goneFiles {
		delete(m.Files, p)
	}
	for _, p := range d.goneDirs {
		delete(m.Dirs, p)
	}
	return m
}
