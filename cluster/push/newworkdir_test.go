package push

import (
	"io/fs"
	"path"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testNewWorkdir: a first push into a workdir that holds only its state
// directory, said new (Options.NewWorkdir), neither lists nor looks at the
// host's tree beyond the top-level directories (one round trip, beside
// the state's), and leaves the same tree and state as any push.
func testNewWorkdir(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	require.NoError(t, e.fs.MkdirAll(path.Join(e.dir, stateDir), 0o755))
	c := newCountingFS(e.fs)
	opts := Options{Verify: VerifyStat, NewWorkdir: true}
	res := e.push(c, opts)
	assert.Equal(t, len(v1), res.FilesSent)
	assert.Zero(t, c.n(opReadDir), "ReadDir calls")
	// conf, data, deep, lib, scripts; and manifest.delta.
	assert.Equal(t, 5+1, c.n(opLstat), "Lstat calls")
	// The journal it wrote, and push-tmp (countingFS hides RemoveDir);
	// not manifest.sum nor manifest.delta, which are not there.
	assert.Equal(t, 2, c.n(opRemove), "Remove calls")
	assert.Equal(t, e.pushed(), e.remote())
	assert.NotEmpty(t, hostSum(e.fs, e.dir).tree, "the commit record vouches for the tree")
	res = e.push(nil, Options{Verify: VerifyStat})
	assert.Zero(t, res.FilesSent)
	assert.Equal(t, len(v1), res.FilesUnchanged)
}

// testNewWorkdirWrong: a caller wrong about Options.NewWorkdir never makes
// a push corrupt anything. Where the workdir holds push's state or a
// top-level directory of the tree, the push is as any other; where it
// holds only other files, they are sent again (replaced whole) and
// nothing the push does not own is deleted.
func testNewWorkdirWrong(e *env) {
	t := e.t
	opts := Options{Verify: VerifyStat, NewWorkdir: true}
	writeFiles(t, e.local, v1)

	// Files of the tree there, no state: compared, not sent again.
	for p, content := range v1 {
		e.writeRemote(p, content)
	}
	e.writeRemote("theirs.txt", "job")
	e.push(nil, Options{Verify: VerifyStat}) // same mtimes, modes as pushed
	require.NoError(t, e.fs.RemoveAll(path.Join(e.dir, stateDir)))
	res := e.push(nil, opts)
	assert.Zero(t, res.FilesSent, "a top-level directory of the tree is there: compared")

	// Pushed before: the manifest says what to send and delete.
	writeFiles(t, e.local, map[string]string{"train.py": "print('v2')\n"})
	res = e.push(nil, opts)
	assert.Equal(t, 1, res.FilesSent)
	remote := e.remote()
	assert.Equal(t, "job", remote["theirs.txt"].Content)
	delete(remote, "theirs.txt")
	assert.Equal(t, e.pushed(), remote)

	// Only top-level files there, edited on the host, no state: all
	// sent again, nothing deleted.
	require.NoError(t, e.fs.RemoveAll(e.dir))
	e.writeRemote("train.py", "edited on the host")
	e.writeRemote("theirs.txt", "job")
	res = e.push(nil, opts)
	assert.Equal(t, len(v1), res.FilesSent)
	assert.Zero(t, res.FilesDeleted)
	remote = e.remote()
	assert.Equal(t, "job", remote["theirs.txt"].Content)
	delete(remote, "theirs.txt")
	assert.Equal(t, e.pushed(), remote)
}

// testNewWorkdirLinked: a directory of the tree that is a link on the
// host of a workdir wrongly said new is replaced, never written through.
func testNewWorkdirLinked(e *env) {
	t := e.t
	writeFiles(t, e.local, map[string]string{"train.py": "t", "data/README": "ours", "data/sub/x": "x"})
	dataset := e.dataset()
	require.NoError(t, e.fs.MkdirAll(path.Join(e.dir, stateDir), 0o755))
	e.linkOver("data", dataset)
	e.push(nil, Options{NewWorkdir: true})
	e.requireDataset(dataset)
	assert.Equal(t, e.pushed(), e.remote())
}

// testEarlyUploadDrift: a verified push whose manifest names a change
// uploads it while the host's tree is listed (preUpload); a file the
// listing finds drifted is sent after it, and is in the journal the push
// leaves if it stops while moving files in, so that the next push, even
// unverified, sends it again.
func testEarlyUploadDrift(e *env) {
	t := e.t
	opts := Options{Verify: VerifyStat, CacheDir: t.TempDir()}
	writeFiles(t, e.local, v1)
	e.push(nil, opts)

	writeFiles(t, e.local, map[string]string{"train.py": "print('v2')\n"})
	e.writeRemote("lib/model.py", "edited on the host")
	c := newCountingFS(e.fs)
	res := e.push(c, opts)
	assert.Equal(t, 2, res.FilesSent)
	assert.Equal(t, 2, c.uploads())
	assert.Equal(t, e.pushed(), e.remote())

	// Cut after the mark, before any file moved in.
	writeFiles(t, e.local, map[string]string{"train.py": "print('v3')\n"})
	e.writeRemote("lib/util/io.py", "edited on the host")
	tree := e.scan(opts)
	_, err := Sync(t.Context(), newCutFS(e.fs, 1<<20, 1), "h0", tree, e.dir, opts)
	var ce *CommitError
	require.ErrorAs(t, err, &ce)
	data, err := e.readRemote(journalName)
	require.NoError(t, err)
	j, err := decodeManifest([]byte(data))
	require.NoError(t, err)
	assert.Contains(t, j.Files, "train.py")
	assert.Contains(t, j.Files, "lib/util/io.py", "the drifted file is pending too")
	e.push(nil, Options{})
	assert.Equal(t, e.pushed(), e.remote())
}

// testNewWorkdirFailed: a push into a new workdir makes the tree's
// directories while the files upload; when an upload fails it removes
// them, leaving the workdir as it was.
func testNewWorkdirFailed(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	require.NoError(t, e.fs.MkdirAll(path.Join(e.dir, stateDir), 0o755))
	opts := Options{Verify: VerifyStat, NewWorkdir: true}
	tree := e.scan(opts)
	writeFiles(t, e.local, map[string]string{"deep/a/b/c/d/e.py": "edited after the scan"})
	_, err := Sync(t.Context(), e.fs, "h0", tree, e.dir, opts)
	require.Error(t, err)
	assert.Equal(t, map[string]entry{}, e.remote(), "the workdir after a failed push")
	infos, err := e.fs.ReadDir(path.Join(e.dir, stateDir))
	require.NoError(t, err)
	assert.Empty(t, infos, "state left by a failed push")
}

// testRemoveDir: the FS's RemoveDir (dirRemover, which both of
// cluster's FSs are) removes an empty directory and nothing else.
func testRemoveDir(e *env) {
	t := e.t
	d, ok := e.fs.(dirRemover)
	require.True(t, ok, "%T removes directories with one request", e.fs)
	e.writeRemote("full/file", "x")
	require.NoError(t, e.fs.MkdirAll(path.Join(e.dir, "empty"), 0o755))
	require.NoError(t, d.RemoveDir(path.Join(e.dir, "empty")))
	assert.Error(t, d.RemoveDir(path.Join(e.dir, "full")), "a directory with a file in it")
	assert.Error(t, d.RemoveDir(path.Join(e.dir, "full/file")), "a file")
	assert.ErrorIs(t, d.RemoveDir(path.Join(e.dir, "gone")), fs.ErrNotExist)
	remote := e.remote()
	assert.NotContains(t, remote, "empty")
	assert.True(t, remote["full"].Dir)
	assert.Equal(t, "x", remote["full/file"].Content)
}
