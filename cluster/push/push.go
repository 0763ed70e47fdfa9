// Package push copies a job's code directory to the workdir of every host,
// incrementally, before each attempt of a run, leaving alone everything
// else the workdir holds.
//
// The local tree is scanned (and hashed) once; each host is then synced
// through its cluster.FS. A manifest kept on the host
// (<workdir>/.drover/manifest.json, and a small delta over it for the
// changes since) records what was pushed, so a re-push with nothing
// changed costs one read of its sum per host and a change costs exactly
// the changed files and a delta: one SFTP upload each when they are few,
// one tar stream into the host's tar when they are many. Changed files are
// first uploaded under <workdir>/.drover/push-tmp and moved into place only
// once every upload has arrived, so a push stopped before that leaves the
// previous tree as it was; the move itself is finished even when
// cancelled, and one cut short by a lost connection is a *CommitError,
// repaired by the next push from the host's journal.
//
// What a push never touches: files in the workdir that it did not push
// (it deletes only what its manifest lists), excluded paths (left as they
// are, even when pushed before), Options.Protect (checkpoint_dir and the
// log directory, ForJob), drover's own .drover/, and anything behind a
// symbolic link it did not create (guard).
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
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/ignore"
)

// DefaultConcurrency is how many files are in flight per host when
// Options.Concurrency is zero: enough to hide SFTP round trips for trees of
// many small files without flooding one connection.
const DefaultConcurrency = 16

// IgnoreFile is the name of the gitignore-syntax file in the code directory
// whose patterns push skips.
const IgnoreFile = ignore.File

// Options tune a push. The zero value pushes everything but .git with
// DefaultConcurrency and no progress reports.
type Options struct {
	// Exclude are job.exclude patterns (gitignore syntax), applied after
	// those of .droverignore so that the job file has the last word.
	// Excluded paths are left alone on the hosts: a file pushed before
	// and excluded now is neither sent nor deleted, as with rsync without
	// --delete-excluded.
	Exclude []string
	// Protect are paths relative to the workdir (slash-separated; the
	// code directory's paths are the workdir's) that push never sends,
	// overwrites or deletes, with everything under them, whatever
	// Exclude and .droverignore say: the job's checkpoint_dir and log
	// directory when they lie inside the code directory (ForJob). The
	// workdir's .drover is always protected.
	Protect []string
	// Progress, when set, is called as a host's push advances. Calls for
	// one host are serialized; calls for different hosts (concurrent
	// Syncs) are not, so a shared callback must lock.
	Progress func(Progress)
	// Concurrency is how many files are in flight per host.
	Concurrency int
	// CacheDir, when set, is where ScanLocal keeps the digests of the
	// files it hashed (CacheDir/scan/), so that a re-scan hashes only the
	// files whose size, mtime, ctime or inode changed, as git's index
	// does: re-hashing a 70 MB tree was most of a no-op push. Empty
	// hashes every file every time.
	CacheDir string
	// Verify is how much of what each host holds is checked against its
	// manifest; see the constants.
	Verify Verify
	// NewWorkdir says the workdir was just created and holds nothing
	// but its .drover state directory (the launcher knows it when the
	// agent install's mkdir -p created it). The push then neither lists
	// nor stats the host's tree (VerifyStat's listing costs four round
	// trips): it looks only, beside the state it reads anyway, at the
	// tree's top-level directories, and sends every file. The host has
	// the last word: a workdir that holds push's state (manifest or sum)
	// or a top-level directory of the tree is pushed to as without
	// NewWorkdir. A caller wrong about the rest (top-level files there)
	// makes the push send those files again, replacing each whole, and
	// delete nothing it did not push; it never writes through a link nor
	// leaves a state that vouches for what is not there.
	NewWorkdir bool
}

func (o Options) concurrency() int {
	if o.Concurrency <= 0 {
		return DefaultConcurrency
	}
	return o.Concurrency
}

// Result says what one Sync did, for the summary line and the run log.
type Result struct {
	Host string
	// FilesSent had their content uploaded.
	FilesSent int
	// FilesDeleted were pushed before and no longer exist locally.
	FilesDeleted int
	// FilesUnchanged had identical content on the host (a changed mode or
	// mtime alone is fixed without re-sending and counts here).
	FilesUnchanged int
	BytesSent      int64
	Duration       time.Duration
	// Warnings are things the user should know that did not stop the push,
	// e.g. an unusable manifest that made push fall back to comparing by
	// size and mtime.
	Warnings []string

	streamed bool // the files went as one tar stream (tests)
}

// Summary renders the result without the host name, e.g.
// "3 sent (1.2 MB), 0 deleted, 120 unchanged in 0.4s".
func (r Result) Summary() string {
	return fmt.Sprintf("%d sent (%s), %d deleted, %d unchanged in %.1fs",
		r.FilesSent, FormatBytes(r.BytesSent), r.FilesDeleted, r.FilesUnchanged, r.Duration.Seconds())
}

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

	match    *Matcher // what is excluded: left alone on the hosts
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
	return t.match != nil && t.match.Excluded(rel, isDir)
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
}

// Dir is one directory of the tree.
type Dir struct {
	Path string
	Mode fs.FileMode // permission bits only
}

// ScanLocal walks dir once, skipping excluded paths, and hashes every file,
// so that syncing many hosts reads the local disk once.
//
// Symlinks are followed only within dir: a link to a file is pushed as a
// copy of that file, a link to a directory as a copy of the directory. A
// link pointing outside dir (or looping) is an error naming the
// link and its target, unless it is excluded. A dangling link is skipped
// with a warning (Tree.Warnings), as rsync skips it.
func ScanLocal(dir string, opts Options) (*Tree, error) {
	return scanLocal(dir, opts, time.Now())
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
	s := &scanner{root: root, m: m}
	if err := s.walk(root, "", []string{root}); err != nil {
		return nil, fmt.Errorf("scan code directory %s: %w", dir, err)
	}
	t := &Tree{Dir: root, Files: s.files, Dirs: s.dirs, Warnings: s.warnings, match: m, open: make(chan struct{}, openBudget())}
	sort.Slice(t.Files, func(i, j int) bool { return t.Files[i].Path < t.Files[j].Path })
	sort.Slice(t.Dirs, func(i, j int) bool { return t.Dirs[i].Path < t.Dirs[j].Path })
	cacheFile, dirty := "", false
	if opts.CacheDir != "" {
		cacheFile = cachePath(opts.CacheDir, root)
		dirty = useCache(t.Files, cacheFile)
	}
	if err := hashFiles(t.Files); err != nil {
		return nil, fmt.Errorf("scan code directory %s: %w", dir, err)
	}
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
	files    []File
	dirs     []Dir
	warnings []string
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

// hashFiles fills in SHA256 (and the size actually read) of every file
// that has none yet (the digest cache gave the others) using a few
// workers, since hashing is CPU-bound and the tree is hashed once per push.
// Each read goes through a pooled buffer: a fresh one per file made
// allocating and zeroing buffers (750 MB for a 3,000-file tree) cost more
// than the hashing.
func hashFiles(files []File) error {
	workers := min(runtime.NumCPU(), 8)
	bufs := sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
	return forEach(context.Background(), len(files), workers, func(_ context.Context, i int) error {
		f := &files[i]
		if f.SHA256 != "" {
			return nil
		}
		r, err := os.Open(f.src)
		if err != nil {
			if cluster.IsTooManyOpenFiles(err) {
				return cluster.NameOpenFiles("hash "+f.Path, err)
			}
			return fmt.Errorf("hash %s: %w", f.Path, err)
		}
		defer r.Close()
		buf := bufs.Get().(*[]byte)
		defer bufs.Put(buf)
		h := sha256.New()
		// struct{io.Reader} hides os.File's WriterTo, which would bring
		// its own buffer instead of this one.
		n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, *buf)
		if err != nil {
			return fmt.Errorf("hash %s: %w", f.Path, err)
		}
		f.Size = n
		f.SHA256 = hex.EncodeToString(h.Sum(nil))
		return nil
	})
}

// Sync makes remoteDir on one host hold tree, through fsys. hostLabel names
// the host in errors and progress ("h3 (10.0.0.13)"). remoteDir is relative
// to the login user's home unless absolute.
//
// On error the tree on the host is the previous one, unless the error is
// a *CommitError: it came while moving files into place, and each file is
// either its old or its new version until the next Sync repairs it. (A
// push into a new workdir, Options.NewWorkdir, whose connection is lost
// may also leave the tree's directories there, empty: mkdirsEarly.)
// Cancelling ctx stops a push before its commit (the previous tree stays)
// but not during it (the new tree is complete, and Sync returns nil).
func Sync(ctx context.Context, fsys cluster.FS, hostLabel string, tree *Tree, remoteDir string, opts Options) (res Result, err error) {
	start := time.Now()
	res.Host = hostLabel
	defer func() {
		res.Duration = time.Since(start)
		var ns *NoSpaceError
		if err != nil && !errors.As(err, &ns) { // that one names the host
			err = fmt.Errorf("push to %s: %w", hostLabel, err)
		}
	}()
	s := &syncer{tree: tree, opts: opts, res: &res, progress: Progress{Host: hostLabel}}
	defer func() {
		if err != nil {
			s.report(func(p *Progress) { p.Phase = PhaseFailed })
		}
	}()
	workdir, err := cleanWorkdir(remoteDir)
	if err != nil {
		return res, err
	}
	s.fs, s.workdir = fsys, workdir
	return res, s.run(ctx)
}

// cleanWorkdir turns a workdir as written in the job into an FS path.
func cleanWorkdir(dir string) (string, error) {
	if dir == "~" {
		dir = "."
	}
	dir = strings.TrimPrefix(dir, "~/")
	if strings.TrimSpace(dir) == "" {
		return "", errors.New("no workdir to push to")
	}
	return path.Clean(dir), nil
}

type syncer struct {
	fs      cluster.FS
	workdir string
	tree    *Tree
	opts    Options
	// createMode is the mode the host gives a new file (0666 less its
	// umask), learnt before a large upload; an upload whose mode is that
	// already needs no chmod. Zero: unknown, chmod every file.
	createMode fs.FileMode
	// newWorkdir: Options.NewWorkdir, and look found nothing that says
	// otherwise. The host's tree is then neither listed nor looked at.
	newWorkdir bool
	// pre: what run sent before guard, or nil.
	pre *preUpload

	mu       sync.Mutex // guards res and progress
	res      *Result
	progress Progress
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
	madeTmp  bool     // the upload directory was created (empty) by plan
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

func (p *plan) empty() bool {
	return len(p.send)+len(p.meta)+len(p.deletes)+len(p.rmdirs)+len(p.mkdirs)+len(p.chdirs) == 0
}

func (s *syncer) remote(rel string) string { return path.Join(s.workdir, rel) }

func (s *syncer) run(ctx context.Context) error {
	s.report(func(p *Progress) { p.Phase = PhaseCompare })
	listed, wait := s.lister(ctx)
	defer wait()
	p, err := s.plan(ctx, listed)
	if err != nil {
		return err
	}
	if s.uploadsEarly(p) {
		s.pre = s.startEarly(ctx, p)
		defer s.pre.wait()
	}
	if !p.empty() || s.opts.Verify != VerifyNone {
		if err := s.guard(ctx, p, listed); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.res.FilesUnchanged = p.unchange + len(p.meta)
	s.mu.Unlock()
	var total int64
	for _, f := range p.send {
		total += f.Size
	}
	s.report(func(pr *Progress) { pr.FilesTotal, pr.BytesTotal = len(p.send), total })

	if p.hadTmp {
		if err := s.fs.RemoveAll(s.remote(tmpDir)); err != nil {
			return fmt.Errorf("remove leftovers of an interrupted push in %s: %w", tmpDir, err)
		}
	}
	if p.empty() && !p.rewrite {
		if p.madeTmp {
			if err := s.removeDir(s.remote(tmpDir)); err != nil {
				return fmt.Errorf("remove %s: %w", tmpDir, err)
			}
		}
		s.report(func(pr *Progress) { pr.Phase = PhaseDone })
		return nil
	}
	if !p.madeTmp {
		if err := s.fs.MkdirAll(s.remote(tmpDir), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", tmpDir, err)
		}
	}
	if err := s.uploadAndMark(ctx, p, total); err != nil {
		return err
	}
	s.report(func(pr *Progress) { pr.Phase = PhaseCommit })
	// Once files start moving, cancelling (Ctrl-C) no longer stops them:
	// the commit is renames on the host, with no content left to send,
	// and finishing it is what leaves each host holding either its old
	// tree or the new one. Only a lost connection (or a host refusing a
	// rename) stops it part-way, and says so.
	if err := s.commit(context.WithoutCancel(ctx), p); err != nil {
		return &CommitError{Err: err}
	}
	s.report(func(pr *Progress) { pr.Phase = PhaseDone })
	return nil
}

// uploadAndMark sends every changed file to its temporary name and marks
// the host (markHost) once their content has arrived; on failure it
// removes the uploads, leaving the tree as it was.
func (s *syncer) uploadAndMark(ctx context.Context, p *plan, total int64) error {
	s.report(func(pr *Progress) { pr.Phase = PhaseUpload })
	// The state files are staged while the files upload, so that their
	// round trips are not added to the uploads': each costs a network
	// latency on a real link (here, one changed file to 8 hosts went from
	// 163 to about 145 ms). Commit then only renames them. The host is
	// marked (markHost) as soon as every upload's content has arrived,
	// while their modes and mtimes are set: one round trip fewer, and an
	// upload that fails to arrive still leaves the state files alone.
	staged := make(chan error, 1)
	p.dirsMade = s.newWorkdir && !s.streams(p) && len(p.mkdirs) > 0
	go func() {
		if s.pre != nil {
			staged <- s.finishStage(p)
			return
		}
		staged <- parallel(func() error { return s.stage(p) }, func() error { return s.mkdirsEarly(ctx, p) })
	}()
	var markOnce sync.Once
	marked := make(chan error, 1)
	mark := func() {
		markOnce.Do(func() {
			go func() {
				err := <-staged
				if err == nil {
					err = s.markHost(p)
				}
				marked <- err
			}()
		})
	}
	err := s.uploadAll(ctx, p, mark)
	if err == nil {
		mark()
	} else if ctx.Err() == nil {
		if nerr := s.noSpace(err, total); nerr != nil {
			err = nerr
		}
	}
	markOnce.Do(func() { marked <- <-staged }) // not started: only the staging to wait for
	if merr := <-marked; err == nil {
		err = merr
	}
	if err != nil {
		// Best effort: the connection may be what failed. The next push
		// removes what is left either way.
		_ = s.fs.RemoveAll(s.remote(tmpDir))
		if p.dirsMade {
			s.removeDirs(p.mkdirs)
		}
		return err
	}
	return nil
}

// plan reads the manifest (and checks for leftovers) and compares it with
// the tree. Without a usable manifest it stats the remote files instead,
// or, verifying, takes them from the listing of the host's tree (listed),
// which has them already.
func (s *syncer) plan(ctx context.Context, listed func() (hostView, error)) (*plan, error) {
	p := &plan{}
	seen := s.look(ctx, p)
	sum, noManifest := seen.sum, seen.noManifest
	if sum.tree == s.tree.key && !p.hadTmp {
		p.unchange = len(s.tree.Files)
		return p, nil
	}
	mm := s.tree.known
	var old, base []byte
	var err error
	if sum.tree != "" {
		old, base, err = readVouched(s.fs, s.workdir, sum, mm)
	}
	vouched := sum.tree != "" && err == nil
	switch {
	case !vouched && noManifest:
		// What readState would find, asked for one round trip sooner.
		err = fmt.Errorf("%w: %w", errNoManifest, &fs.PathError{Op: "stat", Path: path.Join(s.workdir, manifestName), Err: fs.ErrNotExist})
	case !vouched:
		old, p.journal, sum, base, err = readState(s.fs, s.workdir, mm)
	}
	if err == nil {
		var perr error
		if vouched {
			// The same for every host holding this manifest.
			var q plan
			q, perr = mm.compare(sum.tree, func(q *plan) error { return s.planFromManifest(q, old) })
			p.send, p.meta, p.deletes, p.rmdirs, p.mkdirs, p.chdirs, p.unchange = q.send, q.meta, q.deletes, q.rmdirs, q.mkdirs, q.chdirs, q.unchange
		} else {
			perr = s.planFromManifest(p, old)
		}
		if perr != nil {
			*p = plan{hadTmp: p.hadTmp, madeTmp: p.madeTmp}
			err = fmt.Errorf("%w: %s is unusable (%v); comparing by size and mtime instead and deleting nothing", errNoManifest, manifestName, perr)
		}
	}
	switch {
	case err == nil:
		p.known = true
		if p.empty() && !p.hadTmp && !p.journal && stateKey(old) == s.tree.key {
			// Up to date but without a sum (lost, or a push by an older
			// drover): write it so that the next push is cheap again.
			// A format 1 manifest is replaced first.
			if base == nil {
				p.rewrite = true
			} else if err := writeSum(s.fs, s.workdir, stateSum{s.tree.key, sum.base, sum.baseSize}); err != nil {
				s.res.Warnings = append(s.res.Warnings, err.Error())
			}
		}
		if base != nil {
			p.base = sum
			p.delta = mm.deltaFor(sum.base, base, s.tree)
		}
		return p, nil
	case errors.Is(err, errNoManifest):
		if !errors.Is(err, fs.ErrNotExist) { // first push: nothing to say
			s.res.Warnings = append(s.res.Warnings, err.Error())
		}
		if s.newWorkdir {
			// Nothing of the tree there to compare (look).
			return p, s.planFromStat(ctx, p, s.emptyView())
		}
		if s.opts.Verify != VerifyNone {
			// Listed beside the plan: a first push into a fresh
			// workdir needs no stat of its own.
			view, err := listed()
			if err != nil {
				return nil, err
			}
			return p, s.planFromStat(ctx, p, view)
		}
		return p, s.planFromStat(ctx, p, nil)
	default:
		return nil, err
	}
}

// planFromManifest compares the tree with the host's manifest (format 2,
// encoded) in one merge of the two sorted lists. An error means the
// manifest does not read, and p is then incomplete.
func (s *syncer) planFromManifest(p *plan, old []byte) error {
	t := s.tree
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
func (s *syncer) planFromStat(ctx context.Context, p *plan, view hostView) error {
	files, dirs := s.tree.Files, s.tree.Dirs
	lstat := func(rel string) (fs.FileInfo, error) {
		if info, ok := view[rel]; ok {
			if info == nil {
				return nil, fs.ErrNotExist
			}
			return info, nil
		}
		return s.fs.Lstat(s.remote(rel))
	}
	verdict := make([]int, len(files)) // 0 send, 1 meta, 2 unchanged
	// The directories are looked at in the same round, for guard.
	dirInfo := make([]fs.FileInfo, len(dirs))
	err := forEach(ctx, len(files)+len(dirs), s.opts.concurrency(), func(_ context.Context, i int) error {
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
	p.mkdirs = append(p.mkdirs, s.tree.Dirs...)
	p.view = make(hostView, len(dirs))
	for i, d := range dirs {
		p.view[d.Path] = dirInfo[i]
	}
	return nil
}

// probeMin is the upload size (in files) from which a push learns the
// host's mode for new files first: three requests once, to save one per
// file (of the six an upload takes) on the files that already get it.
const probeMin = 32

// probeCreateMode creates, stats and removes an empty file in tmpDir and
// returns the mode it got, or zero when any step fails.
func (s *syncer) probeCreateMode() fs.FileMode {
	name := s.remote(path.Join(tmpDir, "mode-probe"))
	if err := createWith(s.fs, name, nil); err != nil {
		return 0
	}
	info, err := s.fs.Lstat(name)
	if rerr := s.fs.Remove(name); err != nil || rerr != nil {
		return 0
	}
	return info.Mode().Perm()
}

func tmpName(i int) string { return path.Join(tmpDir, fmt.Sprintf("f%06d", i)) }

// uploadAll sends every changed file to its temporary name, with its mode
// and mtime already set so that the rename is all that is left: many files
// as one tar stream where the host can take it, else one SFTP transfer
// each.
// written is called once every file's content has arrived (and was
// checked unchanged locally), before the last modes and mtimes are set;
// not at all when an upload fails first.
func (s *syncer) uploadAll(ctx context.Context, p *plan, written func()) error {
	if s.pre != nil {
		return s.uploadRest(ctx, p, written)
	}
	if s.streams(p) {
		fallback, err := s.streamAll(ctx, s.fs.(extractor), p)
		if !fallback {
			return err
		}
		s.report(func(pr *Progress) { pr.FilesDone, pr.BytesDone = 0, 0 })
		s.mu.Lock()
		s.res.FilesSent, s.res.BytesSent = 0, 0
		s.mu.Unlock()
	}
	if len(p.send) >= probeMin {
		s.createMode = s.probeCreateMode()
	}
	arrived := countdown(len(p.send), written)
	return forEach(ctx, len(p.send), s.opts.concurrency(), func(ctx context.Context, i int) error {
		return s.upload(ctx, p.send[i], s.remote(tmpName(i)), arrived)
	})
}

// countdown returns a function that calls f on its n-th call, from any
// goroutine: "every upload's content is there" when uploads end in any
// order.
func countdown(n int, f func()) func() {
	var left atomic.Int64
	left.Store(int64(n))
	return func() {
		if left.Add(-1) == 0 {
			f()
		}
	}
}

// upload sends one file to tmp and sets its mode and mtime; arrived is
// called between the two, once the content is there.
func (s *syncer) upload(ctx context.Context, f *File, tmp string, arrived func()) error {
	src, done, err := s.tree.openSource(ctx, f)
	if err != nil {
		return err
	}
	defer done()
	w, err := s.fs.Create(tmp)
	if err != nil {
		return fileErr("upload", f.Path, err)
	}
	r := &sendReader{ctx: ctx, r: src, size: f.Size, s: s}
	_, err = io.Copy(w, r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fileErr("upload", f.Path, err)
	}
	if err := checkUnchanged(src, f, r.n); err != nil {
		return err
	}
	arrived()
	// Mode and mtime are independent requests: one round trip for both.
	err = parallel(
		func() error {
			if f.Mode == s.createMode {
				return nil
			}
			if err := s.fs.Chmod(tmp, f.Mode); err != nil {
				return fileErr("set mode of", f.Path, err)
			}
			return nil
		},
		func() error {
			if err := s.fs.Chtimes(tmp, f.ModTime, f.ModTime); err != nil {
				return fileErr("set mtime of", f.Path, err)
			}
			return nil
		},
	)
	if err != nil {
		return err
	}
	s.sent()
	return nil
}

// sendReader counts bytes for progress and stops on cancellation. Size
// lets the SFTP client pipeline writes as it does for an *os.File.
type sendReader struct {
	ctx  context.Context
	r    io.Reader
	size int64
	n    int64
	s    *syncer
}

func (r *sendReader) Size() int64 { return r.size }

func (r *sendReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(b)
	if n > 0 {
		r.n += int64(n)
		r.s.mu.Lock()
		r.s.res.BytesSent += int64(n)
		r.s.mu.Unlock()
		r.s.report(func(pr *Progress) { pr.BytesDone += int64(n) })
	}
	return n, err
}

// Where run stages the state files for commit, under tmpDir.
const (
	finalStaged   = tmpDir + "/manifest-final.json"   // the new manifest ...
	deltaStaged   = tmpDir + "/manifest.delta"        // ... or the delta over the host's
	pendingStaged = tmpDir + "/pending.json"          // the journal ...
	claimStaged   = tmpDir + "/manifest-pending.json" // ... or, without a manifest, a whole pending one
)

// stage writes the state files commit will rename into place: the new
// manifest or delta, and what marks the changing entries pending. (The sum
// is a link, created in place at the end.)
func (s *syncer) stage(p *plan) error {
	files := map[string][]byte{}
	if p.delta != nil {
		files[deltaStaged] = p.delta
	} else {
		files[finalStaged] = s.tree.manifest
	}
	if !p.known {
		files[claimStaged] = encodeManifest(s.pendingManifest(p))
	}
	if p.journaled() {
		files[pendingStaged] = encodeManifest(s.journal(p))
	}
	var fns []func() error
	for name, data := range files {
		fns = append(fns, func() error {
			if err := createWith(s.fs, s.remote(name), data); err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
			return nil
		})
	}
	return parallel(fns...)
}

// markHost readies the host's state before anything in the tree changes:
// no sum may vouch for the old manifest any more, and every entry about to
// change is recorded as pending (the staged journal, and a whole manifest
// when there was none, moved into place), so that if the push stops now
// the next one re-sends those entries rather than trusting the old
// manifest. They go in parallel: a journal beside a still-valid sum is
// ignored, and the tree has not changed yet.
func (s *syncer) markHost(p *plan) error {
	// A state file look saw was not there is not removed: a REMOVE of a
	// missing file costs pkg/sftp a second round trip (an RMDIR).
	var fns []func() error
	if !p.noSum {
		fns = append(fns, func() error { return removeState(s.fs, s.workdir, sumName) })
	}
	if p.delta == nil && !p.noDelta {
		// A delta left over a base with the key of the one written
		// now (a tree pushed again) would apply to it.
		fns = append(fns, func() error { return removeState(s.fs, s.workdir, deltaName) })
	}
	if !p.known {
		fns = append(fns, func() error { return s.place(claimStaged, manifestName) })
	}
	if p.journaled() {
		fns = append(fns, func() error { return s.place(pendingStaged, journalName) })
	}
	return parallel(fns...)
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

// dirRemover is an FS that removes an empty directory with one request
// (cluster's): Remove, which takes a file or a directory, costs pkg/sftp
// two for a directory (a REMOVE that fails, then an RMDIR).
type dirRemover interface {
	RemoveDir(path string) error
}

// removeDir removes the empty directory name.
func (s *syncer) removeDir(name string) error {
	if d, ok := s.fs.(dirRemover); ok {
		return d.RemoveDir(name)
	}
	return s.fs.Remove(name)
}

// place renames a staged state file over its live name (atomically).
func (s *syncer) place(staged, name string) error {
	if err := s.fs.Rename(s.remote(staged), s.remote(name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// parallel runs fns at once and joins their errors.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// commit moves the uploads into place, on a host run has marked. The order
// of the state files is what keeps a host's state trustworthy: sum removed
// and journal written (markHost, once every upload's content arrived),
// tree changed and manifest in place, then sum written. A sum on the host
// therefore always vouches for a complete push, and an upload whose
// content fails to arrive leaves the state files as they were.
func (s *syncer) commit(ctx context.Context, p *plan) error {
	err := s.removeGone(ctx, p)
	if err != nil {
		return err
	}
	placeManifest := func() error { return s.place(finalStaged, manifestName) }
	sum := stateSum{tree: s.tree.key, base: s.tree.key, baseSize: int64(len(s.tree.manifest))}
	if p.delta != nil {
		placeManifest = func() error { return s.place(deltaStaged, deltaName) }
		sum.base, sum.baseSize = p.base.base, p.base.baseSize
	}
	if p.journaled() {
		// The journal marks every entry the change touches as pending,
		// over whichever manifest is beside it: the new one may land
		// while the files move, one round trip sooner. (Deletions are
		// done: a manifest without a file must not precede its removal,
		// or the file would stay, unowned.)
		err = parallel(func() error { return s.changeTree(ctx, p) }, placeManifest)
	} else {
		// Without a journal (only deletions), the manifest must
		// follow the tree.
		if err = s.changeTree(ctx, p); err == nil {
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
				return removeState(s.fs, s.workdir, journalName)
			}
			return nil
		},
		func() error { return placeSum(s.fs, s.workdir, sum) },
		func() error { return s.removeTmp(p) },
	)
}

// removeTmp removes the upload directory once commit moved everything out
// of it: two RMDIRs at most (the staged trees' directory, then it), where
// RemoveAll lists each (four round trips a directory: twelve for a
// streamed push, which was most of its commit). Only what a commit cannot
// leave empty (a tree staged under a new directory whose parent it does
// not create: an empty parent stays) is removed whole.
func (s *syncer) removeTmp(p *plan) error {
	var err error
	if len(p.roots) > 0 {
		err = s.removeDir(s.remote(path.Join(tmpDir, treeStage)))
	}
	if err == nil {
		err = s.removeDir(s.remote(tmpDir))
	}
	if err != nil && len(p.roots) > 0 {
		err = s.fs.RemoveAll(s.remote(tmpDir))
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", tmpDir, err)
	}
	return nil
}

// removeGone removes, first in a commit, the links that directories of
// the tree replace (guard), then the files and directories pushed before
// and gone locally.
func (s *syncer) removeGone(ctx context.Context, p *plan) error {
	for _, rel := range p.unlink {
		// The link itself: Remove never follows it.
		if err := s.fs.Remove(s.remote(rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fileErr("replace the symbolic link", rel, err)
		}
	}
	deleted := 0
	var dmu sync.Mutex
	err := forEach(ctx, len(p.deletes), s.opts.concurrency(), func(_ context.Context, i int) error {
		err := s.fs.Remove(s.remote(p.deletes[i]))
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
	s.mu.Lock()
	s.res.FilesDeleted = deleted
	s.mu.Unlock()
	if err != nil {
		return err
	}
	// One fails when the job put files there: then the directory stays.
	gone := make([]Dir, len(p.rmdirs))
	for i, d := range p.rmdirs {
		gone[i] = Dir{Path: d}
	}
	s.removeDirs(gone)
	return nil
}

// changeTree puts the uploads, directories and modes in place.
func (s *syncer) changeTree(ctx context.Context, p *plan) error {
	conc := s.opts.concurrency()
	renames := func(which func(rel string) bool) error {
		return forEach(ctx, len(p.send), conc, func(_ context.Context, i int) error {
			if !which(p.send[i].Path) {
				return nil
			}
			return s.rename(p.tmpOf(i), p.send[i].Path)
		})
	}
	// The files outside the staged trees move in while the trees do: one
	// round trip fewer (rename makes a parent not there yet).
	loose := func(rel string) bool { return len(p.roots) > 0 && p.rootOf(rel) == "" }
	var moved map[string]bool
	err := parallel(
		func() error { moved = s.moveTrees(ctx, p); return nil },
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
		if err := s.mkdirs(ctx, mkdirs); err != nil {
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
				return s.setMeta(p.meta[i])
			})
		},
		func() error { return s.chmodDirs(ctx, early) },
	)
	if err != nil {
		return err
	}
	return s.chmodDirs(ctx, late)
}

// removeDirs removes dirs that are empty, a level at a time, deepest
// first, one RMDIR each: the directories pushed before and gone locally,
// or those mkdirsEarly made for a push that failed. A directory that is
// not empty (the job's files), or not a directory, stays.
func (s *syncer) removeDirs(dirs []Dir) {
	levels := byDepth(dirs)
	for i := len(levels) - 1; i >= 0; i-- {
		_ = forEach(context.Background(), len(levels[i]), max(s.opts.concurrency(), dirConcurrency), func(_ context.Context, j int) error {
			_ = s.removeDir(s.remote(levels[i][j].Path))
			return nil
		})
	}
}

// byDepth groups dirs by their depth in the tree, the top level first.
func byDepth(dirs []Dir) [][]Dir {
	var levels [][]Dir
	for _, d := range dirs {
		n := strings.Count(d.Path, "/")
		for len(levels) <= n {
			levels = append(levels, nil)
		}
		levels[n] = append(levels[n], d)
	}
	return levels
}

// streams says whether uploadAll sends p's files as one tar stream.
func (s *syncer) streams(p *plan) bool {
	_, ok := s.fs.(extractor)
	return ok && len(p.send) >= streamMin
}

// mkdirs creates dirs (sorted by path: parents first) a depth at a time,
// the directories of one depth in parallel: each then costs one request,
// its parent being there, and a tree costs a round trip per level, not
// per directory.
func (s *syncer) mkdirs(ctx context.Context, dirs []Dir) error {
	for _, level := range byDepth(dirs) {
		err := forEach(ctx, len(level), max(s.opts.concurrency(), dirConcurrency), func(_ context.Context, i int) error {
			if err := s.fs.MkdirAll(s.remote(level[i].Path), 0o755); err != nil {
				return fileErr("create directory", level[i].Path, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// setMeta sets the mode and mtime of a file whose content is unchanged:
// independent requests, one round trip for both.
func (s *syncer) setMeta(f *File) error {
	return parallel(
		func() error {
			if err := s.fs.Chmod(s.remote(f.Path), f.Mode); err != nil {
				return fileErr("set mode of", f.Path, err)
			}
			return nil
		},
		func() error {
			if err := s.fs.Chtimes(s.remote(f.Path), f.ModTime, f.ModTime); err != nil {
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
func (s *syncer) chmodDirs(ctx context.Context, dirs []Dir) error {
	return forEach(ctx, len(dirs), max(s.opts.concurrency(), dirConcurrency), func(_ context.Context, i int) error {
		d := dirs[i]
		err := s.fs.Chmod(s.remote(d.Path), d.Mode)
		if errors.Is(err, fs.ErrNotExist) {
			if err = s.fs.MkdirAll(s.remote(d.Path), 0o755); err == nil {
				err = s.fs.Chmod(s.remote(d.Path), d.Mode)
			}
		}
		if err != nil {
			return fileErr("set mode of directory", d.Path, err)
		}
		return nil
	})
}

// moveTrees moves each staged tree into place with one rename and
// returns the roots it moved. A root that cannot be moved (the host has a
// directory of that name with files in it, or the parent is gone) is left
// for commit to move file by file.
func (s *syncer) moveTrees(ctx context.Context, p *plan) map[string]bool {
	ok := make([]bool, len(p.roots))
	_ = forEach(ctx, len(p.roots), s.opts.concurrency(), func(_ context.Context, i int) error {
		r := p.roots[i]
		ok[i] = s.fs.Rename(s.remote(path.Join(tmpDir, treeStage, r)), s.remote(r)) == nil
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
func (s *syncer) rename(tmp, rel string) error {
	err := s.fs.Rename(s.remote(tmp), s.remote(rel))
	if errors.Is(err, fs.ErrNotExist) {
		if err = s.fs.MkdirAll(path.Dir(s.remote(rel)), 0o755); err == nil {
			err = s.fs.Rename(s.remote(tmp), s.remote(rel))
		}
	}
	if err != nil {
		return fileErr("move into place", rel, err)
	}
	return nil
}

func (s *syncer) pendingManifest(p *plan) *manifest {
	m := newManifest()
	for i := range s.tree.Files {
		f := &s.tree.Files[i]
		m.Files[f.Path] = fileEntry(f)
	}
	s.markPending(m, p)
	return m
}

// journal lists the entries commit is about to change, all pending; read
// over the old manifest it tells the next push what it cannot trust.
func (s *syncer) journal(p *plan) *manifest {
	m := newManifest()
	s.markPending(m, p)
	return m
}

func (s *syncer) markPending(m *manifest, p *plan) {
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

func fileEntry(f *File) manifestFile {
	return manifestFile{SHA256: f.SHA256, Size: f.Size, Mode: f.Mode, MTime: f.ModTime.UnixNano()}
}

// report updates this host's progress under the lock and passes a copy to
// Options.Progress, so calls for one host never overlap.
func (s *syncer) report(update func(*Progress)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	update(&s.progress)
	if s.opts.Progress != nil {
		s.opts.Progress(s.progress)
	}
}

// forEach runs fn for 0..n-1 on up to workers goroutines and returns the
// first error, cancelling the others' context when one fails.
func forEach(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	if n == 0 {
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers = max(1, min(workers, n))
	next := make(chan int)
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
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

// fileErr describes a failed operation on a pushed file by its path in the
// tree ("upload train.py: permission denied") rather than by the temporary
// or absolute name the FS saw, while still wrapping the FS's error so that
// errors.Is(err, fs.ErrPermission) and the like hold.
func fileErr(op, rel string, err error) error {
	return &opError{op: op, rel: rel, err: err}
}

type opError struct {
	op, rel string
	err     error
}

func (e *opError) Error() string {
	msg := e.err.Error()
	var pe *fs.PathError
	if errors.As(e.err, &pe) && e.err == error(pe) {
		msg = pe.Err.Error()
	}
	return e.op + " " + e.rel + ": " + msg
}

func (e *opError) Unwrap() error { return e.err }
