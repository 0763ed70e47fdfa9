package push

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
)

// Layout of push's state inside the remote workdir. Only these paths are
// ever written besides the pushed files themselves.
const (
	stateDir     = ".drover"
	manifestName = stateDir + "/manifest.json"
	// tmpDir holds uploads until every one of them has arrived; nothing in
	// it is part of the tree, so an interrupted push leaves the tree as it
	// was. The next push removes whatever is left in it.
	tmpDir = stateDir + "/push-tmp"
	// sumName holds manifestSum of manifest.json, written last by a push
	// that completed and removed first by one that changes anything. A
	// push whose tree gives the same sum has nothing to do, and learns it
	// from a few bytes instead of the whole manifest (466 KB for 3,000
	// files, read and decoded once per host).
	sumName = stateDir + "/manifest.sum"
	// journalName lists, while a push moves files into place, the entries
	// it is changing (a manifest whose entries are all pending). It stands
	// in for rewriting the whole manifest with those entries marked: a
	// push that changes one file writes a few hundred bytes here, not the
	// manifest twice.
	journalName = stateDir + "/pending.json"
)

// manifestVersion changes when the format does; another version is treated
// like a missing manifest (re-check everything), never misread.
const manifestVersion = 1

// maxManifestSize bounds what is read back from a host, so a corrupt or
// hostile file cannot exhaust memory.
const maxManifestSize = 256 << 20

// manifest records what push last put in a workdir: it is how a re-push
// knows what changed without reading any file on the host, and which files
// drover owns (and may therefore delete) as opposed to checkpoints and logs
// written there by the job.
type manifest struct {
	Version int                     `json:"version"`
	Files   map[string]manifestFile `json:"files"`
	Dirs    map[string]manifestDir  `json:"dirs"`

	journal bool   // a pending journal was applied; the commit removes it
	raw     []byte // manifest.json as read, before the journal
}

type manifestFile struct {
	// SHA256 of the content, hex.
	SHA256 string      `json:"sha256,omitempty"`
	Size   int64       `json:"size"`
	Mode   fs.FileMode `json:"mode"`
	// MTime is the local modification time in Unix nanoseconds (SFTP
	// keeps only seconds on the host; the manifest keeps what was meant).
	MTime int64 `json:"mtime_ns"`
	// Pending marks an entry whose state on the host is unknown because a
	// push was interrupted while moving files into place; the next push
	// re-sends it (or deletes it if gone locally).
	Pending bool `json:"pending,omitempty"`
}

type manifestDir struct {
	Mode    fs.FileMode `json:"mode"`
	Pending bool        `json:"pending,omitempty"`
}

func newManifest() *manifest {
	return &manifest{Version: manifestVersion, Files: map[string]manifestFile{}, Dirs: map[string]manifestDir{}}
}

// manifestSum is what manifest.sum holds for a manifest's bytes: their
// SHA-256 and length, so that the sum is checked against the size of the
// manifest.json actually there.
func manifestSum(data []byte) string {
	return fmt.Sprintf("%x %d\n", sha256.Sum256(data), len(data))
}

// maxSmallFile bounds what is read of manifest.sum.
const maxSmallFile = 4 << 10

// hostSum returns the host's manifest.sum when it vouches for the
// manifest.json actually there (same size), else "": a missing or
// unreadable sum, or one left from another manifest, is no promise.
func hostSum(fsys cluster.FS, workdir string) string {
	var size int64 = -1
	done := make(chan struct{})
	go func() {
		defer close(done)
		if info, err := fsys.Stat(path.Join(workdir, manifestName)); err == nil {
			size = info.Size()
		}
	}()
	sum, err := readSum(fsys, path.Join(workdir, sumName))
	<-done
	fields := strings.Fields(sum)
	if err != nil || len(fields) != 2 || sum != fields[0]+" "+fields[1]+"\n" || fields[1] != strconv.FormatInt(size, 10) {
		return ""
	}
	return sum
}

// readSum reads manifest.sum: a symbolic link whose target is the sum,
// one round trip where a file takes three (open, read, close), which is
// most of what a push with nothing to do costs. A regular file is read as
// well: earlier drovers wrote one, and it is replaced at the next push.
func readSum(fsys cluster.FS, name string) (string, error) {
	sum, err := fsys.Readlink(name)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return sum, err
	}
	data, err := readFile(fsys, name, maxSmallFile)
	return string(data), err
}

// errNoManifest is returned by readManifest when the host has no usable
// manifest; Sync then compares by stat and deletes nothing.
var errNoManifest = errors.New("no manifest")

// readManifest loads and validates the manifest at workdir. A missing,
// unparsable or invalid manifest yields an error wrapping errNoManifest
// saying why; any other error (permission, lost connection) is returned
// as is, because falling back would hide it.
func readManifest(fsys cluster.FS, workdir string) (*manifest, error) {
	var journal []byte
	var jerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		journal, jerr = readFile(fsys, path.Join(workdir, journalName), maxManifestSize)
	}()
	data, err := readFile(fsys, path.Join(workdir, manifestName), maxManifestSize)
	<-done
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", errNoManifest, manifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is unusable (%v); comparing by size and mtime instead and deleting nothing", errNoManifest, manifestName, err)
	}
	switch {
	case errors.Is(jerr, fs.ErrNotExist):
	case jerr != nil:
		return nil, fmt.Errorf("read %s: %w", journalName, jerr)
	default:
		j, err := decodeManifest(journal)
		if err != nil {
			return nil, fmt.Errorf("%w: %s is unusable (%v); comparing by size and mtime instead and deleting nothing", errNoManifest, journalName, err)
		}
		// What an interrupted push was changing is unknown on the host.
		for p, e := range j.Files {
			e.Pending, e.SHA256 = true, ""
			m.Files[p] = e
		}
		for p, d := range j.Dirs {
			d.Pending = true
			m.Dirs[p] = d
		}
		m.journal = true
	}
	m.raw = data
	return m, nil
}

// readFile reads a whole file, refusing one larger than limit bytes so a
// corrupt or hostile file cannot exhaust memory. The limit is on the
// writer side: io.Copy then uses the SFTP file's WriteTo, which keeps many
// reads in flight, where a LimitReader would read one packet at a time.
func readFile(fsys cluster.FS, name string, limit int64) ([]byte, error) {
	r, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	w := &limitedBuffer{limit: limit}
	if _, err := io.Copy(w, r); err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, fmt.Errorf("%s: larger than %d bytes", name, limit)
		}
		return nil, err
	}
	return w.buf.Bytes(), nil
}

var errTooLarge = errors.New("too large")

// limitedBuffer is a bytes.Buffer that refuses to grow past limit.
type limitedBuffer struct {
	buf   bytes.Buffer
	limit int64
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if int64(b.buf.Len()+len(p)) > b.limit {
		return 0, errTooLarge
	}
	return b.buf.Write(p)
}

// decodeManifest parses and validates a manifest. Every path in it is
// checked with validRel, because a tampered manifest must never make push
// delete or chmod anything outside the workdir.
func decodeManifest(data []byte) (*manifest, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("larger than %d bytes", maxManifestSize)
	}
	if bytes.HasPrefix(data, gzipMagic) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		w := &limitedBuffer{limit: maxManifestSize}
		if _, err := io.Copy(w, zr); err != nil {
			return nil, err
		}
		data = w.buf.Bytes()
	}
	m := newManifest()
	if err := json.Unmarshal(data, m); err != nil {
		return nil, err
	}
	if m.Version != manifestVersion {
		return nil, fmt.Errorf("version %d, want %d", m.Version, manifestVersion)
	}
	if m.Files == nil {
		m.Files = map[string]manifestFile{}
	}
	if m.Dirs == nil {
		m.Dirs = map[string]manifestDir{}
	}
	for p, f := range m.Files {
		if err := validRel(p); err != nil {
			return nil, err
		}
		if f.Mode&^fs.ModePerm != 0 || f.Size < 0 {
			return nil, fmt.Errorf("entry %q: bad mode or size", p)
		}
		if !f.Pending {
			if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != 32 {
				return nil, fmt.Errorf("entry %q: bad sha256 %q", p, f.SHA256)
			}
		}
	}
	for p, d := range m.Dirs {
		if err := validRel(p); err != nil {
			return nil, err
		}
		if d.Mode&^fs.ModePerm != 0 {
			return nil, fmt.Errorf("directory entry %q: bad mode", p)
		}
	}
	return m, nil
}

// validRel accepts only clean, relative, slash-separated paths that stay
// inside the workdir and outside push's own state directory.
func validRel(p string) error {
	bad := func(why string) error { return fmt.Errorf("refusing path %q: %s", p, why) }
	switch {
	case p == "" || p == ".":
		return bad("empty")
	case strings.HasPrefix(p, "/"):
		return bad("absolute")
	case strings.ContainsRune(p, 0):
		return bad("contains NUL")
	}
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "..":
			return bad("'..' would leave the workdir")
		case "", ".":
			return bad("not a clean path")
		}
	}
	if p == stateDir || strings.HasPrefix(p, stateDir+"/") {
		return bad("inside drover's " + stateDir + " directory")
	}
	return nil
}

// gzipMagic starts a gzip stream; a manifest without it is plain JSON (as
// drover wrote them before, and as people write them by hand).
var gzipMagic = []byte{0x1f, 0x8b}

// encodeManifest is JSON, gzipped: the hex digests are most of a manifest
// and a third of its size compressed (466 KB to about 170 KB for 3,000
// files), and every push that changes anything writes it to every host.
func encodeManifest(m *manifest) ([]byte, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeSum replaces manifest.sum outside a commit, to repair a host whose
// sum is missing or does not match.
func writeSum(fsys cluster.FS, workdir, sum string) error {
	if err := removeState(fsys, workdir, sumName); err != nil {
		return err
	}
	return placeSum(fsys, workdir, sum)
}

// placeSum creates manifest.sum, which must not exist, as a link to sum:
// atomic, so a sum is never seen half written.
func placeSum(fsys cluster.FS, workdir, sum string) error {
	if err := fsys.Symlink(sum, path.Join(workdir, sumName)); err != nil {
		return fmt.Errorf("write %s: %w", sumName, err)
	}
	return nil
}

// createWith creates (or truncates) name holding data.
func createWith(fsys cluster.FS, name string, data []byte) error {
	w, err := fsys.Create(name)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// removeState removes one of push's state files; one already gone is fine.
func removeState(fsys cluster.FS, workdir, name string) error {
	if err := fsys.Remove(path.Join(workdir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// manifestMemo shares manifests between the concurrent Syncs of one push.
// Hosts usually hold the same manifest (every host got the same tree), so
// it is read, checked and decoded once, not once per host, and not read
// from any host when the local cache (CacheDir/manifests/) has it: the
// push that wrote it put it there. Decoded manifests are read-only.
type manifestMemo struct {
	cacheDir string // "" for no local cache
	mu       sync.Mutex
	bySum    map[string]*memoEntry
}

type memoEntry struct {
	once sync.Once
	m    *manifest
	err  error
}

func newManifestMemo(cacheDir string) *manifestMemo {
	return &manifestMemo{cacheDir: cacheDir, bySum: map[string]*memoEntry{}}
}

// get returns the manifest whose sum is sum, from the memo, the local
// cache or fetch (the first caller's; later callers share its result).
// An error means the caller should read its own host's manifest.
func (mm *manifestMemo) get(sum string, fetch func() ([]byte, error)) (*manifest, error) {
	mm.mu.Lock()
	e := mm.bySum[sum]
	if e == nil {
		e = &memoEntry{}
		mm.bySum[sum] = e
	}
	mm.mu.Unlock()
	e.once.Do(func() { e.m, e.err = mm.load(sum, fetch) })
	return e.m, e.err
}

func (mm *manifestMemo) load(sum string, fetch func() ([]byte, error)) (*manifest, error) {
	data := mm.cached(sum)
	if data == nil {
		var err error
		if data, err = fetch(); err != nil {
			return nil, err
		}
		if manifestSum(data) != sum {
			return nil, errors.New("manifest changed since its sum was read")
		}
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, err
	}
	m.raw = data
	return m, nil
}

// cacheKeep is how many manifests the local cache keeps: the current tree
// and a few before it, for hosts that missed a push.
const cacheKeep = 4

func (mm *manifestMemo) cachePath(sum string) string {
	digest, _, _ := strings.Cut(sum, " ")
	return filepath.Join(mm.cacheDir, "manifests", digest)
}

// cached returns the cached manifest with this sum, or nil.
func (mm *manifestMemo) cached(sum string) []byte {
	if mm.cacheDir == "" {
		return nil
	}
	data, err := os.ReadFile(mm.cachePath(sum))
	if err != nil || manifestSum(data) != sum {
		return nil
	}
	now := time.Now()
	_ = os.Chtimes(mm.cachePath(sum), now, now) // recently used: kept
	return data
}

// store puts a manifest in the local cache (best effort, like the digest
// cache) and trims the cache to the cacheKeep most recently used.
func (mm *manifestMemo) store(sum string, data []byte) {
	if mm.cacheDir == "" || mm.cached(sum) != nil {
		return
	}
	if writeFileAtomic(mm.cachePath(sum), data) {
		prune(filepath.Dir(mm.cachePath(sum)), cacheKeep)
	}
}

// treeKey names what a tree's manifest is encoded from (every entry and
// the format), so that the encoding can be looked up instead of redone:
// encoding and compressing 3,000 entries took 7 ms of every push.
func treeKey(t *Tree) string {
	h := sha256.New()
	fmt.Fprintf(h, "manifest v%d json+gzip\n", manifestVersion)
	for _, f := range t.Files {
		fmt.Fprintf(h, "f %q %s %d %o %d\n", f.Path, f.SHA256, f.Size, f.Mode, f.ModTime.UnixNano())
	}
	for _, d := range t.Dirs {
		fmt.Fprintf(h, "d %q %o\n", d.Path, d.Mode)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (mm *manifestMemo) treePath(key string) string {
	return filepath.Join(mm.cacheDir, "manifests", "by-tree", key)
}

// forTree returns the cached encoding of the tree with this key, or nil.
func (mm *manifestMemo) forTree(key string) []byte {
	if mm.cacheDir == "" {
		return nil
	}
	sum, err := os.ReadFile(mm.treePath(key))
	if err != nil {
		return nil
	}
	return mm.cached(string(sum))
}

// rememberTree records which manifest (by sum) the tree with this key
// encodes to.
func (mm *manifestMemo) rememberTree(key, sum string) {
	if mm.cacheDir != "" && writeFileAtomic(mm.treePath(key), []byte(sum)) {
		prune(filepath.Dir(mm.treePath(key)), 4*cacheKeep)
	}
}

// writeFileAtomic writes name through a temporary file and a rename, so a
// concurrent drover reads the old file or the new one. It reports whether
// it worked; the caches it serves are best effort.
func writeFileAtomic(name string, data []byte) bool {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return false
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), name) != nil {
		os.Remove(tmp.Name())
		return false
	}
	return true
}

// prune keeps the keep most recently modified regular files in dir.
func prune(dir string, keep int) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type aged struct {
		name string
		t    time.Time
	}
	var files []aged
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && !strings.HasPrefix(e.Name(), ".tmp-") {
			files = append(files, aged{e.Name(), info.ModTime()})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].t.After(files[j].t) })
	for _, f := range files[min(len(files), keep):] {
		os.Remove(filepath.Join(dir, f.name))
	}
}
