package push

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

var sha = strings.Repeat("0123456789abcdef", 4)

// TestManifestFormat2RoundTrip: every entry (odd paths, pending entries,
// directories) survives encoding, and one content has one encoding
// whatever order the maps are filled in.
func TestManifestFormat2RoundTrip(t *testing.T) {
	m := newManifest()
	for i, p := range []string{"train.py", "with space.py", "new\nline.py", "quote\".py", "back\\slash.py", "ünï.py", "bad\xffutf8.py", "a/b/c.py"} {
		m.Files[p] = manifestFile{SHA256: sha, Size: int64(i), Mode: 0o640 + fsMode(i%2), MTime: int64(i) * 1e9}
	}
	m.Files["pending.py"] = manifestFile{Size: 3, Mode: 0o600, MTime: -5, Pending: true}
	m.Dirs["a"] = manifestDir{Mode: 0o755}
	m.Dirs["a/b"] = manifestDir{Mode: 0o700, Pending: true}
	data := encodeManifest(m)
	back, err := decodeManifest(data)
	require.NoError(t, err)
	assert.Equal(t, m.Files, back.Files)
	assert.Equal(t, m.Dirs, back.Dirs)
	assert.Equal(t, data, encodeManifest(back), "canonical")
	assert.Equal(t, 1, strings.Count(string(data), "\n")-len(m.Files)-len(m.Dirs), "one line per entry and the header")

	d := &delta{base: sha, files: map[string]manifestFile{"x.py": {SHA256: sha, Size: 1, Mode: 0o644}},
		dirs: map[string]manifestDir{"new dir": {Mode: 0o750}}, goneFiles: []string{"a/b/c.py", "new\nline.py"}, goneDirs: []string{"a/b"}}
	dback, err := decodeDelta(encodeDelta(d))
	require.NoError(t, err)
	assert.Equal(t, d, dback)
	appliedData, err := applyDelta(data, d)
	require.NoError(t, err)
	applied, err := decodeManifest(appliedData)
	require.NoError(t, err)
	assert.Contains(t, applied.Files, "x.py")
	assert.NotContains(t, applied.Files, "a/b/c.py")
	assert.NotContains(t, applied.Dirs, "a/b")
}

func fsMode(i int) os.FileMode { return os.FileMode(i) }

// TestDecodeFormat2Rejects: what a tampered or truncated manifest holds
// is refused, never half-read.
func TestDecodeFormat2Rejects(t *testing.T) {
	h := manifestHeader + "\n"
	f := func(p string) string { return "f " + sha + " 1 644 0 " + p + "\n" }
	for _, tc := range []struct{ name, data, want string }{
		{"no header", "f x\n", "invalid character"}, // read as format 1 JSON
		{"other version", "drover-manifest 3\n", "bad header"},
		{"not terminated", h + strings.TrimSuffix(f(`"a"`), "\n"), "not terminated"},
		{"unknown entry", h + "z \"a\"\n", "unknown entry"},
		{"unquoted path", h + f("a"), "bad path"},
		{"escaping path", h + f(`"../x"`), "refusing path"},
		{"absolute path", h + f(`"/etc/passwd"`), "refusing path"},
		{"state dir", h + f(`".drover/x"`), "refusing path"},
		{"trailing slash", h + f(`"lib/"`), "refusing path"},
		{"NUL", h + f(`"a\x00b"`), "refusing path"},
		{"bad sha", h + `f zz 1 644 0 "a"` + "\n", "bad sha256"},
		{"upper-case sha", h + "f " + strings.ToUpper(sha) + ` 1 644 0 "a"` + "\n", "bad sha256"},
		{"negative size", h + "f " + sha + ` -1 644 0 "a"` + "\n", "bad size"},
		{"mode beyond permissions", h + "f " + sha + ` 1 4755 0 "a"` + "\n", "bad size, mode"},
		{"missing field", h + "f " + sha + ` 1 644 "a"` + "\n", "bad path"},
		{"twice", h + f(`"a"`) + f(`"a"`), "listed twice"},
		{"dir twice", h + "d 755 \"a\"\nD 755 \"a\"\n", "listed twice"},
		{"delta for a manifest", manifestHeader + " delta " + sha + "\n", "a delta where a whole manifest belongs"},
		{"removal in a manifest", h + "-f \"a\"\n", "a delta where a whole manifest belongs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeManifest([]byte(tc.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := decodeDelta([]byte(h))
	assert.ErrorContains(t, err, "not a delta")
	_, err = decodeDelta([]byte(manifestHeader + " delta xyz\n"))
	assert.ErrorContains(t, err, "bad header")
}

// TestStaleDeltaIgnored: a delta names the base it goes over; beside
// another base (a push that wrote a whole manifest and stopped before
// removing it, or a drover writing format 1) it is not applied.
func TestStaleDeltaIgnored(t *testing.T) {
	home := cluster.NewOSFS(t.TempDir())
	require.NoError(t, home.MkdirAll(stateDir, 0o755))
	m := newManifest()
	m.Files["a.py"] = manifestFile{SHA256: sha, Size: 1, Mode: 0o644}
	baseData := encodeManifest(m)
	require.NoError(t, createWith(home, manifestName, baseData))
	over := func(key string) []byte {
		return encodeDelta(&delta{base: key, files: map[string]manifestFile{"b.py": {SHA256: sha, Size: 2, Mode: 0o644}}})
	}

	require.NoError(t, createWith(home, deltaName, over(stateKey(baseData))))
	old, _, sum, base, err := readState(home, ".", newManifestMemo(""))
	require.NoError(t, err)
	assert.Equal(t, []string{"a.py", "b.py"}, filesOf(t, old), "a delta over this base")
	assert.Equal(t, stateKey(baseData), sum.base)
	assert.Equal(t, int64(len(baseData)), sum.baseSize)
	assert.Equal(t, baseData, base)

	require.NoError(t, createWith(home, deltaName, over(strings.Repeat("1", 64))))
	old, _, _, _, err = readState(home, ".", newManifestMemo(""))
	require.NoError(t, err)
	assert.Equal(t, []string{"a.py"}, filesOf(t, old), "a delta over another base")

	// Format 1 has no key: no delta applies to it, and none can be
	// written over it. Nor over a format 2 manifest that is not sorted
	// as drover writes them.
	unsorted := manifestHeader + "\n" + strings.SplitN(string(baseData), "\n", 2)[1] + "f " + sha + ` 1 644 0 "0.py"` + "\n"
	for name, data := range map[string]string{
		"format 1": `{"version": 1, "files": {"a.py": {"sha256": "` + sha + `", "size": 1, "mode": 420}}}`,
		"unsorted": unsorted,
	} {
		require.NoError(t, createWith(home, manifestName, []byte(data)))
		require.NoError(t, createWith(home, deltaName, over(stateKey([]byte(data)))))
		old, _, sum, base, err = readState(home, ".", newManifestMemo(""))
		require.NoError(t, err, name)
		assert.NotContains(t, filesOf(t, old), "b.py", name)
		assert.Equal(t, "", sum.base, name)
		assert.Nil(t, base, name)
	}
}

// filesOf lists the files of an encoded manifest.
func filesOf(t *testing.T, data []byte) []string {
	t.Helper()
	m, err := decodeManifest(data)
	require.NoError(t, err)
	return sortedKeys(m.Files)
}

// testDeltas: small changes write a delta over the host's manifest instead
// of the whole manifest; every change is relative to that same base; a
// change to more than a quarter of the tree writes a whole manifest again
// and removes the delta. Each push starts from a fresh scan without a
// local cache, so the host's base and delta are read back and checked.
func testDeltas(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	first := hostSum(e.fs, e.dir)
	require.Equal(t, first.tree, first.base)
	baseData, err := e.readRemote(manifestName)
	require.NoError(t, err)

	hostDelta := func() *delta {
		data, err := e.readRemote(deltaName)
		require.NoError(t, err)
		d, err := decodeDelta([]byte(data))
		require.NoError(t, err)
		return d
	}
	steps := []struct {
		name   string
		change func()
		files  []string // the delta's entries set
		gone   []string // ... and removed
	}{
		{"one file", func() { writeFiles(t, e.local, map[string]string{"train.py": "v2"}) }, []string{"train.py"}, nil},
		{"another", func() { writeFiles(t, e.local, map[string]string{"lib/model.py": "v2"}) }, []string{"lib/model.py", "train.py"}, nil},
		{"a deletion", func() { require.NoError(t, os.Remove(filepath.Join(e.local, "empty.txt"))) }, []string{"lib/model.py", "train.py"}, []string{"empty.txt"}},
		{"back to the first tree's files", func() { writeFiles(t, e.local, v1) }, nil, nil},
	}
	for _, st := range steps {
		st.change()
		c := newCountingFS(e.fs)
		res := e.push(c, Options{})
		require.Empty(t, res.Warnings, st.name)
		assert.Equal(t, e.pushed(), e.remote(), st.name)
		sum := hostSum(e.fs, e.dir)
		assert.Equal(t, e.scan(Options{}).key, sum.tree, st.name)
		assert.Equal(t, first.base, sum.base, "%s: over the first push's manifest", st.name)
		got, err := e.readRemote(manifestName)
		require.NoError(t, err)
		assert.Equal(t, baseData, got, "%s: the manifest is not rewritten", st.name)
		if st.files == nil && st.gone == nil {
			continue
		}
		d := hostDelta()
		assert.Equal(t, st.files, sortedKeys(d.files), st.name)
		assert.Equal(t, st.gone, d.goneFiles, st.name)
	}

	// Change more than a quarter of the tree.
	many := map[string]string{}
	for i := range maxDeltaMin + 1 {
		many[fmt.Sprintf("gen/m%03d.py", i)] = fmt.Sprint(i)
	}
	writeFiles(t, e.local, many)
	e.push(nil, Options{})
	sum := hostSum(e.fs, e.dir)
	assert.Equal(t, sum.tree, sum.base, "a whole manifest after a large change")
	_, err = e.readRemote(deltaName)
	assert.ErrorIs(t, err, os.ErrNotExist, "the delta is removed with a whole manifest")
	assert.Equal(t, e.pushed(), e.remote())
	c := newCountingFS(e.fs)
	e.push(c, Options{})
	assert.Equal(t, []string{path.Join(e.dir, sumName)}, c.opened, "then a no-op again")
}

// testFormat1Upgraded: a workdir last pushed by a drover writing format 1
// (JSON manifest, sum in a regular file) is read, and the next push
// writes format 2 even when no file changed, so that the push after reads
// only the sum.
func testFormat1Upgraded(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	m := treeManifest(e.scan(Options{}))
	m.Version = 1
	data, err := jsonMarshal(m)
	require.NoError(t, err)
	e.writeRemote(manifestName, string(data))
	require.NoError(t, e.fs.Remove(path.Join(e.dir, sumName)))
	e.writeRemote(sumName, manifestSumV1(data))

	res := e.push(nil, Options{})
	assert.Equal(t, 0, res.FilesSent)
	assert.Empty(t, res.Warnings)
	got, err := e.readRemote(manifestName)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(got, manifestHeader+"\n"), "format 2 written")
	c := newCountingFS(e.fs)
	e.push(c, Options{})
	assert.Equal(t, []string{path.Join(e.dir, sumName)}, c.opened)
	assert.Equal(t, e.pushed(), e.remote())

	// Deletions still work from a format 1 manifest: it says which files
	// drover owns.
	e.writeRemote(manifestName, string(data))
	require.NoError(t, e.fs.Remove(path.Join(e.dir, sumName)))
	require.NoError(t, os.Remove(filepath.Join(e.local, "train.py")))
	res = e.push(nil, Options{})
	assert.Equal(t, 1, res.FilesDeleted)
	assert.Equal(t, e.pushed(), e.remote())
}

func jsonMarshal(m *manifest) ([]byte, error) { return json.Marshal(m) }

// manifestSumV1 is the sum format 1 wrote: digest and size of the file.
func manifestSumV1(data []byte) string { return fmt.Sprintf("%x %d\n", sha256.Sum256(data), len(data)) }

// testVouchedButDisordered: a manifest out of order with a sum that
// vouches for it (both written by hand) is not misread: push warns,
// compares by size and mtime, deletes nothing, and writes a good one.
func testVouchedButDisordered(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	good, err := e.readRemote(manifestName)
	require.NoError(t, err)
	lines := strings.SplitAfter(good, "\n")
	lines[1], lines[2] = lines[2], lines[1]
	bad := strings.Join(lines, "")
	e.writeRemote(manifestName, bad)
	require.NoError(t, e.fs.Remove(path.Join(e.dir, sumName)))
	sum := stateSum{tree: stateKey([]byte(bad)), base: stateKey([]byte(bad)), baseSize: int64(len(bad))}
	require.NoError(t, placeSum(e.fs, e.dir, sum))
	require.NoError(t, os.Remove(filepath.Join(e.local, "train.py")))

	res := e.push(nil, Options{})
	require.Len(t, res.Warnings, 1)
	assert.Contains(t, res.Warnings[0], "out of order")
	assert.Equal(t, 0, res.FilesDeleted, "nothing deleted on a manifest that does not read")
	_, err = e.readRemote("train.py")
	assert.NoError(t, err)
	res = e.push(nil, Options{})
	assert.Empty(t, res.Warnings, "a good manifest was written")
}

// testUploadDirEarly: a tree that changed since the last scan creates the upload
// directory in the push's first round trip (Mkdir, not MkdirAll after);
// when that finds leftovers of an interrupted push they are removed, and
// when the hosts turn out to hold the tree already the directory goes.
func testUploadDirEarly(e *env) {
	t := e.t
	opts := Options{CacheDir: t.TempDir()}
	writeFiles(t, e.local, v1)
	e.push(nil, opts)

	writeFiles(t, e.local, map[string]string{"train.py": "print('v2')\n"})
	c := newCountingFS(e.fs)
	res := e.push(c, opts)
	assert.Equal(t, 1, res.FilesSent)
	assert.Equal(t, 1, c.n(opMkdir), "Mkdir calls")
	assert.Zero(t, c.n(opMkdirAll), "MkdirAll calls")
	assert.Equal(t, 1, c.n(opLstat), "Lstat calls (of manifest.delta, in the same round trip)")
	assert.Equal(t, e.pushed(), e.remote())

	// Leftovers: the Mkdir fails, they are found and removed.
	writeFiles(t, e.local, map[string]string{"train.py": "print('v3')\n"})
	e.writeRemote(tmpDir+"/f000000", "left over")
	res = e.push(nil, opts)
	assert.Equal(t, 1, res.FilesSent)
	assert.Equal(t, e.pushed(), e.remote())
	_, err := e.fs.Lstat(path.Join(e.dir, tmpDir))
	assert.ErrorIs(t, err, os.ErrNotExist, "upload directory after the push")

	// Another machine (another cache) pushing the tree the hosts hold.
	c = newCountingFS(e.fs)
	res = e.push(c, Options{CacheDir: t.TempDir()})
	assert.Zero(t, res.FilesSent)
	assert.Equal(t, 1, c.n(opMkdir))
	assert.Equal(t, 1, c.n(opRemove), "the early upload directory removed")
	_, err = e.fs.Lstat(path.Join(e.dir, tmpDir))
	assert.ErrorIs(t, err, os.ErrNotExist, "upload directory after a push with nothing to do")

	// The same tree again from here: nothing to do is expected, no Mkdir.
	c = newCountingFS(e.fs)
	e.push(c, opts)
	assert.Zero(t, c.n(opMkdir))
	assert.Zero(t, c.n(opRemove))
}

// failChtimesFS fails every Chtimes, as a connection lost right after an
// upload's content arrived would.
type failChtimesFS struct{ cluster.FS }

func (failChtimesFS) Chtimes(string, time.Time, time.Time) error { return errors.New("lost") }

// testMarkedOnceContentArrived: the host is marked (sum removed, journal
// written) as soon as the uploads' content has arrived, while their mtimes
// are set; if that then fails, the tree is unchanged and the next push
// trusts the journal and completes.
func testMarkedOnceContentArrived(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	old := e.remote()
	writeFiles(t, e.local, map[string]string{"train.py": "print('v2')\n"})
	_, err := Sync(context.Background(), failChtimesFS{e.fs}, "h0", e.scan(Options{}), e.dir, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "set mtime of train.py")
	assert.Equal(t, old, e.remote(), "the tree is unchanged")
	_, err = e.fs.Lstat(path.Join(e.dir, sumName))
	assert.ErrorIs(t, err, os.ErrNotExist, "no sum once marked")
	journal, err := e.readRemote(journalName)
	require.NoError(t, err)
	assert.Contains(t, journal, `"train.py"`)

	res := e.push(nil, Options{})
	assert.Equal(t, 1, res.FilesSent)
	assert.Equal(t, e.pushed(), e.remote())
}
