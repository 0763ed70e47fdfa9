package push

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/droverhq/drover/cluster"
)

// The tree: the code directory as every host must hold it, scanned and
// hashed once per push (ScanLocal), whatever the number of hosts: the
// "here" of the scan phase (its "there" is scanHost, scan.go).

// Tree is a scanned code directory: what every host's workdir must hold.
// It is read-only after ScanLocal and shared by concurrent Syncs.
type Tree struct {
	// Dir is the code directory, absolute with symlinks resolved.
	Dir string
	// Files are the regular files to push, sorted by Path.
	Files []File
	// Dirs are the directories to create, sorted by Path (parents first).
	Dirs []Dir
	// Bytes is the total size of Files.
	Bytes int64
	// Warnings are what the scan skipped that the user should hear of
	// (a dangling symlink), once per push rather than once per host.
	Warnings []string
	// Changing are the files that kept changing while the scan read
	// them, sorted by path: pushed as snapshots, or skipped (changing.go).
	// Each is worth one warning (Changing.Warning) per run, not per host
	// or attempt.
	Changing []Changing

	match *Matcher // what is excluded: left alone on the hosts
	// left are files left out that are not excluded, and as excluded
	// left alone on the hosts: skipped as changing (leaveOut), and
	// drover's own output (Options.Outputs).
	left     map[string]bool
	manifest []byte   // the manifest a host holds once it has this tree
	lines    []string // its entries' lines: Files, then Dirs
	key      string   // stateKey(manifest)
	known    *manifestMemo
	// fresh: the tree changed since the last scan of its directory, so
	// hosts are likely to need changes (and a push creates its upload
	// directory early).
	fresh bool
	// open holds a slot per file a push of this tree has open, every
	// host's push together (openBudget, openSource).
	open chan struct{}
	// snapMax is the largest snapshot of a changing file (snapshotMax).
	snapMax int64
	// mu guards derived: the trees made from this one when a file
	// changed under an upload (withSnapshot), by the file's path.
	mu      sync.Mutex
	derived map[string]derived
}

// File is one regular file of the tree. A symlink inside the code directory
// appears as the file it points to, under the link's own path.
type File struct {
	// Path is slash-separated and relative to the code directory.
	Path    string
	Size    int64
	Mode    fs.FileMode // permission bits only
	ModTime time.Time
	// SHA256 is the hex digest of the content; content, not mtime,
	// decides whether a host has the file.
	SHA256 string

	src string // local path to read (a symlink's resolved target)
	id  statID // src's stat identity at the scan, the digest cache's key
	// snap, when set, is the snapshot of a file that kept changing,
	// read instead of src (copySnapshot): unlinked, it cannot change.
	snap *os.File
}

// Dir is one directory of the tree.
type Dir struct {
	Path string
	Mode fs.FileMode // permission bits only
}

// Key names the tree's content: two scans with the same Key would leave a
// host holding the same files, modes and mtimes. A caller that pushed a
// tree can tell from it that the next scan has nothing new to send.
func (t *Tree) Key() string { return t.key }

// encode sets the tree's manifest, its lines and key.
func (t *Tree) encode() {
	t.manifest = encodeTree(t)
	t.key = stateKey(t.manifest)
	t.lines = strings.Split(strings.TrimSuffix(string(t.manifest[len(manifestHeader)+1:]), "\n"), "\n")
	if len(t.Files)+len(t.Dirs) == 0 {
		t.lines = nil
	}
}

// excluded reports whether a path the host's manifest lists is excluded
// now: push leaves it alone rather than deleting it.
func (t *Tree) excluded(rel string, isDir bool) bool {
	return t.match != nil && t.match.Excluded(rel, isDir) || !isDir && t.left[rel]
}

// ScanLocal walks dir once, skipping excluded paths, and hashes every file,
// so that syncing many hosts reads the local disk once.
//
// Symlinks are followed only within dir: a link to a file is pushed as a
// copy of that file, a link to a directory as a copy of the directory. A
// link pointing outside dir (or looping) is an error naming the
// link and its target, unless it is excluded. A dangling link is skipped
// with a warning (Tree.Warnings), as rsync skips it. Running out of file
// descriptors anywhere in the scan is named as such
// (cluster.TooManyOpenFilesError, with the limit), as the dials' is.
func ScanLocal(dir string, opts Options) (*Tree, error) {
	t, err := scanLocal(dir, opts, time.Now())
	if err != nil {
		return nil, cluster.NameOpenFiles("scan code directory "+dir, err)
	}
	return t, nil
}

// scanLocal is ScanLocal with the scan's start time given, which decides
// which digests are too recent to cache (tests move it ahead).
func scanLocal(dir string, opts Options, start time.Time) (*Tree, error) {
	root, err := filepath.Abs(dir)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return nil, fmt.Errorf("scan code directory %s: %w", dir, err)
	}
	info, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("scan code directory %s: %w", dir, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("scan code directory %s: not a directory", dir)
	}
	m, err := loadMatcher(root, opts.Exclude)
	if err != nil {
		return nil, err
	}
	for _, p := range opts.Protect {
		m.Protect(p)
	}
	s := &scanner{root: root, m: m, outputs: opts.Outputs, left: map[string]bool{}}
	if err := s.walk(root, "", []string{root}); err != nil {
		return nil, fmt.Errorf("scan code directory %s: %w", dir, err)
	}
	t := &Tree{Dir: root, Files: s.files, Dirs: s.dirs, Warnings: s.warnings, match: m, open: make(chan struct{}, openBudget()),
		left: s.left, snapMax: opts.snapshotMax(), derived: map[string]derived{}}
	sort.Slice(t.Files, func(i, j int) bool { return t.Files[i].Path < t.Files[j].Path })
	sort.Slice(t.Dirs, func(i, j int) bool { return t.Dirs[i].Path < t.Dirs[j].Path })
	cacheFile, dirty := "", false
	if opts.CacheDir != "" {
		cacheFile = cachePath(opts.CacheDir, root)
		dirty = useCache(t.Files, cacheFile)
	}
	if t.Changing, err = steadyFiles(t.Files, min(runtime.NumCPU(), 8), t.snapMax, opts.readHook); err != nil {
		return nil, fmt.Errorf("scan code directory %s: %w", dir, err)
	}
	t.leaveOut(t.Changing)
	if dirty {
		saveCache(cacheFile, t.Files, start)
	}
	for _, f := range t.Files {
		t.Bytes += f.Size
	}
	// Encoded once here, not once per host: every host gets the same. The
	// local cache keeps it for the next push, which will find it named by
	// the hosts' sums.
	t.encode()
	t.known = newManifestMemo(opts.CacheDir)
	t.known.store(t.key, t.manifest)
	if opts.CacheDir != "" {
		t.fresh = changedSinceLastScan(cachePath(opts.CacheDir, root)+".last", t.key)
	}
	return t, nil
}

// changedSinceLastScan reports whether key differs from the one recorded
// in file by the last scan, and records it.
func changedSinceLastScan(file, key string) bool {
	last, err := os.ReadFile(file)
	if err == nil && string(last) == key {
		return false
	}
	writeFileAtomic(file, []byte(key))
	return true
}

// PatternError is a bad exclude pattern: line Line of File (the
// .droverignore) or the job file's key Key (job.exclude[i]). It is the
// user's mistake in what they wrote, so the launcher reports it as the job
// file's ConfigError (the CLI exits 2); it reads the same.
type PatternError struct {
	File    string // .droverignore's path; "" for job.exclude
	Line    int    // 1-based line in File; 0 for job.exclude
	Key     string // "job.exclude[i]"; "" for .droverignore
	Pattern string
	Fix     string
	Err     error // the *BadPatternError
}

func (e *PatternError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	fmt.Fprintf(&b, "bad pattern %q (%s)", e.Pattern, e.Fix)
	return b.String()
}

func (e *PatternError) Unwrap() error { return e.Err }

// patternFix is what to do about a pattern that does not compile: an
// unclosed '[' is the only way to write one.
const patternFix = "close the '[' or escape it as '\\['"

// loadMatcher builds the exclusion rules: .droverignore, then job.exclude.
// A bad pattern is a *PatternError naming the file and line or the key.
func loadMatcher(root string, exclude []string) (*Matcher, error) {
	m := NewMatcher()
	ignorePath := filepath.Join(root, IgnoreFile)
	data, err := os.ReadFile(ignorePath)
	switch {
	case err == nil:
		if err := m.Add(IgnoreFile, strings.Split(string(data), "\n")); err != nil {
			var bp *BadPatternError
			errors.As(err, &bp)
			return nil, &PatternError{File: ignorePath, Line: bp.Line, Pattern: bp.Pattern, Fix: patternFix, Err: err}
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read %s: %w", ignorePath, err)
	}
	if err := m.Add("job.exclude", exclude); err != nil {
		var bp *BadPatternError
		errors.As(err, &bp)
		return nil, &PatternError{Key: fmt.Sprintf("job.exclude[%d]", bp.Line-1), Pattern: bp.Pattern, Fix: patternFix, Err: err}
	}
	return m, nil
}

type scanner struct {
	root     string
	m        *Matcher
	outputs  []fs.FileInfo // Options.Outputs
	left     map[string]bool
	files    []File
	dirs     []Dir
	warnings []string
}

// ownOutput reports whether info (a regular file's stat) is one of
// drover's own outputs: the same file, whatever its name.
func ownOutput(info fs.FileInfo, outputs []fs.FileInfo) bool {
	for _, o := range outputs {
		if os.SameFile(info, o) {
			return true
		}
	}
	return false
}

// walk lists real (a resolved directory) whose tree path is rel. stack holds
// the resolved directories being walked, to refuse symlink loops.
func (s *scanner) walk(real, rel string, stack []string) error {
	entries, err := os.ReadDir(real)
	if err != nil {
		return err
	}
	for _, e := range entries {
		childRel := e.Name()
		if rel != "" {
			childRel = rel + "/" + e.Name()
		}
		childReal := filepath.Join(real, e.Name())
		info, err := os.Lstat(childReal)
		if err != nil {
			return err
		}
		src := childReal
		if info.Mode()&fs.ModeSymlink != 0 {
			target, terr := filepath.EvalSymlinks(childReal)
			var tinfo fs.FileInfo
			if terr == nil {
				tinfo, terr = os.Stat(target)
			}
			isDir := terr == nil && tinfo.IsDir()
			if s.m.ExcludedSelf(strings.Split(childRel, "/"), isDir) {
				continue
			}
			link, _ := os.Readlink(childReal)
			if errors.Is(terr, fs.ErrNotExist) {
				// As rsync does: a broken link (a stale venv, an editor's
				// lock) is no reason to push nothing.
				s.warnings = append(s.warnings, fmt.Sprintf("symlink %s -> %s: its target does not exist; skipped", childRel, link))
				continue
			}
			if terr != nil {
				return fmt.Errorf("symlink %s -> %s: target cannot be read: %w", childRel, link, terr)
			}
			if !within(s.root, target) {
				return fmt.Errorf("symlink %s -> %s points outside the code directory %s: push copies only the code directory (exclude the link in %s or job.exclude, or copy its target to the hosts separately)",
					childRel, link, s.root, IgnoreFile)
			}
			for _, d := range stack {
				if d == target {
					return fmt.Errorf("symlink %s -> %s loops back to a directory above it", childRel, link)
				}
			}
			info, src = tinfo, target
		} else if s.m.ExcludedSelf(strings.Split(childRel, "/"), info.IsDir()) {
			continue
		}
		switch {
		case info.IsDir():
			s.dirs = append(s.dirs, Dir{Path: childRel, Mode: info.Mode().Perm()})
			if err := s.walk(src, childRel, append(stack, src)); err != nil {
				return err
			}
		case info.Mode().IsRegular() && ownOutput(info, s.outputs):
			// drover's own output (`drover run > out.log` in the code
			// directory) is not code, and would change while pushed.
			s.left[childRel] = true
		case info.Mode().IsRegular():
			s.files = append(s.files, File{Path: childRel, Size: info.Size(), Mode: info.Mode().Perm(), ModTime: info.ModTime(),
				src: src, id: fileStatID(info)})
		default:
			// Sockets, fifos and devices have no content to push.
		}
	}
	return nil
}

// within reports whether p is root or below it (both resolved).
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
