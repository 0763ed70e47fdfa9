package push

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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

// safetyTests are the scenarios of what a push must never touch (issue
// 21), run like coreTests on every kind of FS.
var safetyTests = []struct {
	name string
	fn   func(e *env)
}{
	{"CheckpointsNeverPushedOrDeleted", testCheckpointsProtected},
	{"ExcludedLaterLeftAlone", testExcludedLaterLeftAlone},
	{"SymlinkedDirReplacedSFTP", func(e *env) { testSymlinkedDir(e, 0) }},
	{"SymlinkedDirReplacedStream", func(e *env) { testSymlinkedDir(e, 2*streamMin) }},
	{"SymlinkedFileNotChmodded", testSymlinkedFile},
	{"SymlinkBeforeFirstPush", testSymlinkBeforeFirstPush},
	{"SymlinkBeforeFirstPushVerified", testSymlinkBeforeFirstPushVerified},
	{"NewWorkdirWrong", testNewWorkdirWrong},
	{"NewWorkdirLinked", testNewWorkdirLinked},
	{"NewWorkdirFailed", testNewWorkdirFailed},
	{"EarlyUploadDrift", testEarlyUploadDrift},
	{"VerifyRepairsDrift", testVerifyRepairsDrift},
	{"VerifyRepairsDriftStream", testVerifyRepairsManyFiles},
	{"CancelledDuringCommitFinishes", func(e *env) { testCancelledDuringCommit(e, 0) }},
	{"CancelledDuringCommitFinishesStream", func(e *env) { testCancelledDuringCommit(e, 4*streamMin) }},
	{"CutDuringCommitSaysMixed", testCutDuringCommit},
}

func TestSafetyOSFS(t *testing.T) {
	for _, tc := range safetyTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(&env{t: t, local: t.TempDir(), fs: cluster.NewOSFS(t.TempDir()), dir: "jobs/work"})
		})
	}
}

// testCheckpointsProtected is issue 21's second item: code = "." with
// checkpoint_dir = "checkpoints" inside it. A local smoke test's
// checkpoint must not replace the fleet's, and deleting it locally must
// not delete the fleet's, even when an older drover pushed it once.
func testCheckpointsProtected(e *env) {
	t := e.t
	writeFiles(t, e.local, map[string]string{
		"train.py":                      "train",
		"checkpoints/step-1/model.pt":   "laptop step 1",
		"runs/job-20260101/events.log":  "local run log",
		".drover/logs/attempt-1/w0.log": "a local .drover",
	})
	// Pushed once by a drover that did not protect them: the hosts list
	// them in their manifest.
	e.push(nil, Options{})
	// The fleet trains on: its own step 1, and a step 2.
	e.writeRemote("checkpoints/step-1/model.pt", "fleet step 1")
	e.writeRemote("checkpoints/step-2/model.pt", "fleet step 2")
	e.writeRemote(".drover/logs/attempt-1/w0.log", "the host's log")

	protect := Options{Protect: []string{"checkpoints", "runs"}}
	writeFiles(t, e.local, map[string]string{
		"checkpoints/step-1/model.pt":  "laptop step 1, again",
		"checkpoints/step-3/model.pt":  "laptop step 3",
		"runs/job-20260101/events.log": "more local log",
		"train.py":                     "train v2",
	})
	res := e.push(nil, protect)
	assert.Equal(t, 1, res.FilesSent, "only train.py")
	require.NoError(t, os.RemoveAll(filepath.Join(e.local, "checkpoints")))
	require.NoError(t, os.RemoveAll(filepath.Join(e.local, "runs")))
	res = e.push(nil, protect)
	assert.Equal(t, 0, res.FilesDeleted)

	remote := e.remote()
	assert.Equal(t, "fleet step 1", remote["checkpoints/step-1/model.pt"].Content)
	assert.Equal(t, "fleet step 2", remote["checkpoints/step-2/model.pt"].Content)
	assert.NotContains(t, remote, "checkpoints/step-3/model.pt")
	assert.Equal(t, "local run log", remote["runs/job-20260101/events.log"].Content, "left as it was")
	log, err := e.readRemote(".drover/logs/attempt-1/w0.log")
	require.NoError(t, err)
	assert.Equal(t, "the host's log", log)
	assert.Equal(t, "train v2", remote["train.py"].Content)

	// '!' in job.exclude cannot bring a protected path back.
	writeFiles(t, e.local, map[string]string{"checkpoints/step-9/model.pt": "laptop"})
	res = e.push(nil, Options{Protect: protect.Protect, Exclude: []string{"!checkpoints/"}})
	assert.Equal(t, 0, res.FilesSent)
}

// testExcludedLaterLeftAlone is issue 21's seventh item: excluding data/
// after it was pushed leaves data/ on the hosts, as rsync does without
// --delete-excluded; the rest of the tree still syncs.
func testExcludedLaterLeftAlone(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	require.NoError(t, os.Remove(filepath.Join(e.local, "train.py")))
	writeFiles(t, e.local, map[string]string{"data/labels.csv": "changed locally", "lib/model.py": "v2"})

	res := e.push(nil, Options{Exclude: []string{"data/", "*.sh"}})
	assert.Equal(t, 1, res.FilesDeleted, "train.py only")
	assert.Equal(t, 1, res.FilesSent, "lib/model.py only")
	remote := e.remote()
	assert.Equal(t, v1["data/labels.csv"], remote["data/labels.csv"].Content, "excluded: neither deleted nor sent")
	assert.Equal(t, v1["scripts/run.sh"], remote["scripts/run.sh"].Content)
	assert.NotContains(t, remote, "train.py")

	// No longer excluded: pushed again.
	res = e.push(nil, Options{})
	assert.Equal(t, 2, res.FilesSent, "data/labels.csv and scripts/run.sh (no longer in the manifest)")
	assert.Equal(t, "changed locally", e.remote()["data/labels.csv"].Content)
}

// dataset makes a directory beside the workdir, as a user's ~/dataset,
// and returns its absolute path on the host.
func (e *env) dataset() string {
	e.t.Helper()
	home, err := e.fs.Home()
	require.NoError(e.t, err)
	dir := path.Join(home, path.Dir(e.dir), "dataset")
	for name, content := range map[string]string{"README": "precious", "other.txt": "also precious"} {
		require.NoError(e.t, e.fs.MkdirAll(dir, 0o755))
		w, err := e.fs.Create(path.Join(dir, name))
		require.NoError(e.t, err)
		_, err = io.WriteString(w, content)
		require.NoError(e.t, err)
		require.NoError(e.t, w.Close())
	}
	require.NoError(e.t, e.fs.Chmod(path.Join(dir, "README"), 0o600))
	return dir
}

// linkOver replaces rel in the workdir with a symbolic link to target.
func (e *env) linkOver(rel, target string) {
	e.t.Helper()
	require.NoError(e.t, e.fs.RemoveAll(path.Join(e.dir, rel)))
	require.NoError(e.t, e.fs.Symlink(target, path.Join(e.dir, rel)))
}

// requireDataset fails unless dir holds exactly what dataset made.
func (e *env) requireDataset(dir string) {
	e.t.Helper()
	got := snapshot(e.t, e.fs, dir, false)
	require.Len(e.t, got, 2, "the dataset behind the link: %v", got)
	assert.Equal(e.t, "precious", got["README"].Content)
	assert.Equal(e.t, fs.FileMode(0o600), got["README"].Mode)
	assert.Equal(e.t, "also precious", got["other.txt"].Content)
}

// testSymlinkedDir is issue 21's first item: after a push, the host's
// workdir/data is replaced by a link to ~/dataset. The next push must not
// write through it (the link is replaced by the pushed directory, as
// rsync does), and once data/ is gone locally, must not delete through
// it. extra files under data/ make the push go as a tar stream.
func testSymlinkedDir(e *env, extra int) {
	t := e.t
	files := map[string]string{"train.py": "train", "data/README": "ours v1"}
	for i := range extra {
		files[fmt.Sprintf("data/part-%02d.csv", i)] = "v1"
	}
	writeFiles(t, e.local, files)
	e.push(nil, Options{})
	dataset := e.dataset()
	e.linkOver("data", dataset)

	for p := range files {
		if strings.HasPrefix(p, "data/") {
			files[p] = "v2 of " + p
		}
	}
	writeFiles(t, e.local, files)
	res := e.push(nil, Options{})
	assert.Equal(t, extra > 0, res.streamed, "streamed")
	e.requireDataset(dataset)
	assert.Equal(t, e.pushed(), e.remote(), "data/ pushed in place of the link")
	info, err := e.fs.Lstat(path.Join(e.dir, "data"))
	require.NoError(t, err)
	assert.True(t, info.IsDir(), "data on the host: %v", info.Mode())

	// The link comes back, and data/ goes away locally: nothing behind
	// the link is deleted, and the link itself stays.
	e.linkOver("data", dataset)
	require.NoError(t, os.RemoveAll(filepath.Join(e.local, "data")))
	res = e.push(nil, Options{})
	assert.Equal(t, 0, res.FilesDeleted)
	assert.NotEmpty(t, res.Warnings, "the link left alone is reported")
	e.requireDataset(dataset)
	target, err := e.fs.Readlink(path.Join(e.dir, "data"))
	require.NoError(t, err)
	assert.Equal(t, dataset, target)
}

// testSymlinkedFile: a pushed file replaced on the host by a link to a
// file of the user's; a push that changes only its mode or mtime must
// not chmod the link's target, but put the file back.
func testSymlinkedFile(e *env) {
	t := e.t
	writeFiles(t, e.local, map[string]string{"train.py": "train", "run.sh": "#!/bin/sh\n"})
	e.push(nil, Options{})
	dataset := e.dataset()
	e.linkOver("run.sh", path.Join(dataset, "README"))
	require.NoError(t, os.Chmod(filepath.Join(e.local, "run.sh"), 0o755))
	res := e.push(nil, Options{})
	assert.Equal(t, 1, res.FilesSent)
	e.requireDataset(dataset)
	assert.Equal(t, e.pushed(), e.remote())
}

// testVerifyRepairsDrift is issue 21's sixth item: files edited, deleted
// or re-moded on the host after a push. A plain push trusts the manifest;
// VerifyStat (drover run) repairs what shows in sizes, mtimes and modes;
// VerifyContent (drover push --verify) also what does not.
func testVerifyRepairsDrift(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	e.writeRemote("lib/model.py", "edited on the host, longer than before")
	require.NoError(t, e.fs.Remove(path.Join(e.dir, "conf/base.yaml")))
	require.NoError(t, e.fs.RemoveAll(path.Join(e.dir, "deep/a/b")))
	require.NoError(t, e.fs.Chmod(path.Join(e.dir, "scripts/run.sh"), 0o700))

	res := e.push(nil, Options{})
	assert.Equal(t, 0, res.FilesSent, "a plain push trusts the manifest")

	res = e.push(nil, Options{Verify: VerifyStat})
	assert.Equal(t, 3, res.FilesSent, "lib/model.py, conf/base.yaml, deep/a/b/c/d/e.py")
	assert.Equal(t, len(v1)-3, res.FilesUnchanged)
	assert.Equal(t, e.pushed(), e.remote())

	// Nothing drifted: verifying reads, and writes nothing.
	c := newCountingFS(e.fs)
	res = e.push(c, Options{Verify: VerifyStat})
	assert.Equal(t, 0, res.FilesSent)
	for _, o := range []op{opCreate, opRename, opRemove, opRemoveAll, opChmod, opChtimes, opMkdirAll, opOpen} {
		assert.Zero(t, c.n(o), "%s calls in a verified push with nothing to do", o)
	}
	assert.Equal(t, 1, c.n(opReadlink), "the sum")

	// The same size and mtime: only the content tells.
	e.writeRemote("train.py", "print('v9')\n")
	mt := time.Date(2001, 2, 3, 4, 5, len("train.py")%60, 0, time.UTC)
	require.NoError(t, e.fs.Chtimes(path.Join(e.dir, "train.py"), mt, mt))
	res = e.push(nil, Options{Verify: VerifyStat})
	assert.Equal(t, 0, res.FilesSent, "size and mtime as pushed")
	res = e.push(nil, Options{Verify: VerifyContent})
	assert.Equal(t, 1, res.FilesSent)
	assert.Equal(t, e.pushed(), e.remote())
}

// testVerifyRepairsManyFiles: enough drift for the tar stream, the
// directory holding it deleted on the host.
func testVerifyRepairsManyFiles(e *env) {
	t := e.t
	files := map[string]string{"train.py": "t"}
	for i := range 2 * streamMin {
		files[fmt.Sprintf("pkg/m%02d.py", i)] = fmt.Sprintf("m%d", i)
	}
	writeFiles(t, e.local, files)
	e.push(nil, Options{})
	require.NoError(t, e.fs.RemoveAll(path.Join(e.dir, "pkg")))
	res := e.push(nil, Options{Verify: VerifyStat})
	assert.Equal(t, 2*streamMin, res.FilesSent)
	assert.True(t, res.streamed)
	assert.Equal(t, e.pushed(), e.remote())
}

// testCancelledDuringCommit is issue 21's fourth item: Ctrl-C once the
// commit has begun. The host must not be left with some new files among
// old ones: the commit finishes, Sync says the host has the new tree, and
// it has.
func testCancelledDuringCommit(e *env, extra int) {
	t := e.t
	files := map[string]string{}
	for p, c := range v1 {
		files[p] = c
	}
	for i := range extra {
		files[fmt.Sprintf("lib/gen/m%03d.py", i)] = "v1"
	}
	writeFiles(t, e.local, files)
	e.push(nil, Options{})
	for p := range files {
		files[p] = "v2 " + p
	}
	delete(files, "train.py")
	require.NoError(t, os.Remove(filepath.Join(e.local, "train.py")))
	writeFiles(t, e.local, files)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var committing bool
	opts := Options{Concurrency: 2, Progress: func(p Progress) {
		if p.Phase == PhaseCommit {
			committing = true
			cancel()
		}
	}}
	res, err := Sync(ctx, e.fs, "h0", e.scan(opts), e.dir, opts)
	require.True(t, committing, "the commit never began")
	require.NoError(t, err, "a commit that began is finished")
	assert.Equal(t, len(files), res.FilesSent)
	assert.Equal(t, 1, res.FilesDeleted)
	assert.Equal(t, e.pushed(), e.remote())
	_, err = e.fs.Lstat(path.Join(e.dir, journalName))
	assert.ErrorIs(t, err, fs.ErrNotExist, "journal after a finished commit")
	// And the host's state vouches for it: nothing to do.
	res = e.push(nil, Options{})
	assert.Equal(t, 0, res.FilesSent)
}

// testCutDuringCommit: only a failure of the host or the connection
// stops a commit part-way; the error says the tree is mixed (a typed
// error the CLI reports per host), and the next push repairs it.
func testCutDuringCommit(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	for p := range v1 {
		writeFiles(t, e.local, map[string]string{p: "v2 " + p})
	}
	c := newCutFS(e.fs, 1<<40, 4) // the journal's rename and three files'
	_, err := Sync(context.Background(), c, "h0", e.scan(Options{}), e.dir, Options{Concurrency: 1})
	require.ErrorIs(t, err, errCut)
	var ce *CommitError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.NotEqual(t, e.pushed(), e.remote(), "cut part-way: mixed")
	res := e.push(nil, Options{})
	assert.Equal(t, len(v1), res.FilesSent, "every entry in doubt is sent again")
	assert.Equal(t, e.pushed(), e.remote())
}

// testSymlinkBeforeFirstPush: without a manifest (a first push, or one
// that cannot be read) push compares by stat; a link where the tree has
// a directory is replaced all the same.
func testSymlinkBeforeFirstPush(e *env) {
	t := e.t
	writeFiles(t, e.local, map[string]string{"train.py": "t", "data/README": "ours", "data/sub/x": "x"})
	dataset := e.dataset()
	require.NoError(t, e.fs.MkdirAll(e.dir, 0o755))
	e.linkOver("data", dataset)
	e.push(nil, Options{})
	e.requireDataset(dataset)
	assert.Equal(t, e.pushed(), e.remote())
}

// testSymlinkBeforeFirstPushVerified is drover run's first push into a
// workdir with no manifest (VerifyStat), planned from the listing of the
// host's tree rather than a stat of each path: a directory and a file of
// the tree that are links on the host are still replaced, never written
// through, and the commit record is written (the next push finds the tree
// there and sends nothing).
func testSymlinkBeforeFirstPushVerified(e *env) {
	t := e.t
	writeFiles(t, e.local, map[string]string{"train.py": "t", "notes.txt": "n", "data/README": "ours", "data/sub/x": "x"})
	dataset := e.dataset()
	require.NoError(t, e.fs.MkdirAll(e.dir, 0o755))
	e.linkOver("data", dataset)
	e.linkOver("notes.txt", path.Join(dataset, "other.txt"))
	res := e.push(nil, Options{Verify: VerifyStat})
	assert.Equal(t, 4, res.FilesSent)
	e.requireDataset(dataset)
	assert.Equal(t, e.pushed(), e.remote())
	assert.NotEmpty(t, hostSum(e.fs, e.dir).tree, "the commit record vouches for the tree")
	res = e.push(nil, Options{})
	assert.Equal(t, 0, res.FilesSent)
	assert.Equal(t, 4, res.FilesUnchanged)
}
