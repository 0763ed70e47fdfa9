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
// log directory, ForJob), drover's own .drover/, drover's own output files
// (Options.Outputs), and anything behind a symbolic link it did not create
// (guard).
//
// A file that changes while pushed (a log kept in the code directory)
// never fails a push: the scan reads it again a few times, then takes a
// snapshot of it or skips it, and SyncSteady pushes a host again with a
// snapshot when one changes under its upload (changing.go).
//
// # The phases of one host's push
//
// Sync runs four phases in order (hostPush.run, in this file), each a
// narrow type in its own file, handed the value the one before made, so
// that the push reads top-down and no phase calls back into another:
//
//  1. Scan (tree.go, scan.go): what is here and there. ScanLocal scans
//     and hashes the code directory once for every host (Tree). scanHost
//     asks one host, in one round trip (look), for its state files, its
//     upload directory and, for Options.NewWorkdir, the tree's top-level
//     directories; it reads the manifest the sum names (readManifest)
//     and, verifying, starts listing the host's tree (lister). Value:
//     hostScan.
//  2. Plan (pushplan.go, guard.go): what changes. planner compares the
//     host's manifest with the tree (planFromManifest, once per manifest
//     for every host: manifestMemo) or, without one, the host's files by
//     size and mtime (planFromStat); guard then rewrites the plan around
//     symbolic links on the host and, verifying, files that drifted.
//     Value: plan.
//  3. Upload (upload.go, stream.go): move the bytes. uploader sends
//     plan.send to temporary names in .drover/push-tmp, modes and mtimes
//     set: one SFTP transfer each, or one tar stream for many
//     (streamAll, which stages new directories whole). It adds to the
//     plan where each file waits (plan.tmp, plan.roots).
//  4. Commit (commit.go): journal, rename, manifest. committer stages the
//     state files while the upload runs (stage), marks the host once the
//     content has arrived (markHost: sum removed, journal in place), then
//     moves the uploads into place and writes the manifest or delta, and
//     the sum last (commit).
//
// The phases share only hostPush: the FS and workdir, the tree, the
// options, and the tally (Result and Progress, under one lock). Where two
// overlap to save round trips, run shows it: the listing runs beside the
// plan; a verified push with few changes starts its upload and the
// commit's staging before guard (preUpload, stageEarly); the staging
// runs beside the upload and the mark goes as soon as the content is
// there (uploadAndMark); and a push into a new workdir creates its
// directories while its files upload (mkdirsEarly). Each says why what it
// moves forward keeps a push's guarantees.
package push

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"
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
	// Outputs are drover's own output files (its stdout and stderr when
	// redirected to a file: StdOutputs): wherever they lie in the code
	// directory, under whatever name, they are never pushed and are left
	// alone on the hosts, as excluded files are. `drover run job.toml >
	// run.log` in the code directory would otherwise push a file that
	// changes while it is pushed.
	Outputs []fs.FileInfo

	// snapMax replaces snapshotMax (tests); readHook runs during each
	// read of a file for its digest (tests: a file changing under it).
	snapMax  int64
	readHook func(path string)
}

func (o Options) snapshotMax() int64 {
	if o.snapMax > 0 {
		return o.snapMax
	}
	return snapshotMax
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
	// Changing are the files SyncSteady found changed under their
	// upload, and took as snapshots or skipped (the scan's are
	// Tree.Changing): one warning each per run (Changing.Warning).
	Changing []Changing
	// Tree is the tree the host now holds (SyncSteady): the one given,
	// or one made from it with snapshots of the Changing files.
	Tree *Tree

	streamed bool // the files went as one tar stream (tests)
}

// Summary renders the result without the host name, e.g.
// "3 sent (1.2 MB), 0 deleted, 120 unchanged in 0.4s".
func (r Result) Summary() string {
	return fmt.Sprintf("%d sent (%s), %d deleted, %d unchanged in %.1fs",
		r.FilesSent, FormatBytes(r.BytesSent), r.FilesDeleted, r.FilesUnchanged, r.Duration.Seconds())
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
	e := &hostPush{tree: tree, opts: opts, tally: &tally{res: &res, progress: Progress{Host: hostLabel}, onReport: opts.Progress}}
	defer func() {
		if err != nil {
			e.report(func(p *Progress) { p.Phase = PhaseFailed })
		}
	}()
	workdir, err := cleanWorkdir(remoteDir)
	if err != nil {
		return res, err
	}
	e.fs, e.workdir = fsys, workdir
	return res, e.run(ctx)
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

// run is one host's push as its four phases (see the package doc), each
// a value of its own file handed what the one before found, so that the
// order of a push's requests, and where two phases overlap to save round
// trips, shows here and only here.
func (e *hostPush) run(ctx context.Context) error {
	e.report(func(p *Progress) { p.Phase = PhaseCompare })
	// 1. Scan: what the host holds. The listing of its tree (VerifyStat)
	// runs on beside the plan, which reads it in guard.
	h := scanHost(ctx, e)
	defer h.wait()
	// 2. Plan: what changes, from the host's manifest or from its files.
	pl := &planner{hostPush: e, scan: h}
	p, err := pl.plan(ctx)
	if err != nil {
		return err
	}
	c := &committer{hostPush: e}
	if p.resum {
		// Up to date but for the lost sum: the commit's only write,
		// made as soon as the plan knows, as it always was.
		c.repairSum(p)
	}
	up := &uploader{hostPush: e, newWorkdir: h.newWorkdir}
	// What goes beside the upload: the commit's state files, and the
	// directories of a push into a new workdir (mkdirsEarly).
	stage := func() error {
		return parallel(func() error { return c.stage(p) }, func() error { return up.mkdirsEarly(ctx, p) })
	}
	if up.early(p) {
		// The upload (and the commit's staging) starts before guard
		// has the listing: see preUpload.
		es := c.stageEarly(p)
		up.startEarly(ctx, p)
		defer es.wait()
		defer up.pre.wait()
		stage = func() error { return c.finishStage(p, es) }
	}
	if !p.empty() || e.opts.Verify != VerifyNone {
		if err := pl.guard(ctx, p); err != nil {
			return err
		}
	}
	e.result(func(r *Result) { r.FilesUnchanged = p.unchange + len(p.meta) })
	e.report(func(pr *Progress) { pr.FilesTotal, pr.BytesTotal = len(p.send), p.bytes() })
	// 3. Upload: the changed files, to their temporary names.
	if err := up.prepare(p); err != nil {
		return err
	}
	if p.empty() && !p.rewrite {
		e.report(func(pr *Progress) { pr.Phase = PhaseDone })
		return nil
	}
	if err := uploadAndMark(ctx, up, c, p, stage); err != nil {
		return err
	}
	// 4. Commit: the uploads into place, and the state that vouches for them.
	e.report(func(pr *Progress) { pr.Phase = PhaseCommit })
	// Once files start moving, cancelling (Ctrl-C) no longer stops them:
	// the commit is renames on the host, with no content left to send,
	// and finishing it is what leaves each host holding either its old
	// tree or the new one. Only a lost connection (or a host refusing a
	// rename) stops it part-way, and says so.
	if err := c.commit(context.WithoutCancel(ctx), p); err != nil {
		return &CommitError{Err: err}
	}
	e.report(func(pr *Progress) { pr.Phase = PhaseDone })
	return nil
}

// uploadAndMark is where the upload and the commit overlap: it sends
// every changed file to its temporary name (up) while stage writes the
// commit's state files, and marks the host (c.markHost) once their
// content has arrived; on failure it removes the uploads, leaving the
// tree as it was.
func uploadAndMark(ctx context.Context, up *uploader, c *committer, p *plan, stage func() error) error {
	up.report(func(pr *Progress) { pr.Phase = PhaseUpload })
	// The state files are staged while the files upload, so that their
	// round trips are not added to the uploads': each costs a network
	// latency on a real link (here, one changed file to 8 hosts went from
	// 163 to about 145 ms). Commit then only renames them. The host is
	// marked (markHost) as soon as every upload's content has arrived,
	// while their modes and mtimes are set: one round trip fewer, and an
	// upload that fails to arrive still leaves the state files alone.
	staged := make(chan error, 1)
	p.dirsMade = up.newWorkdir && !up.streams(p) && len(p.mkdirs) > 0
	go func() { staged <- stage() }()
	var markOnce sync.Once
	marked := make(chan error, 1)
	mark := func() {
		markOnce.Do(func() {
			go func() {
				err := <-staged
				if err == nil {
					err = c.markHost(p)
				}
				marked <- err
			}()
		})
	}
	err := up.uploadAll(ctx, p, mark)
	if err == nil {
		mark()
	} else if ctx.Err() == nil {
		if nerr := up.noSpace(err, p.bytes()); nerr != nil {
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
		_ = up.fs.RemoveAll(up.remote(tmpDir))
		if p.dirsMade {
			up.removeDirs(p.mkdirs)
		}
		return err
	}
	return nil
}
