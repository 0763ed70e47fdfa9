package push

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// env is one push scenario: a local code directory and a remote workdir
// reached through fs (an OSFS into a temp dir, or SFTP to a fleet host).
type env struct {
	t     *testing.T
	local string
	fs    cluster.FS
	dir   string // remote workdir, as given to Sync
}

// coreTests run against every kind of FS: os here, SFTP in fleet_test.go.
var coreTests = []struct {
	name string
	fn   func(e *env)
}{
	{"FirstPushThenNoop", testFirstPushThenNoop},
	{"OneChangedFile", testOneChangedFile},
	{"DeleteRemovesOnlyPushedFiles", testDeleteRemovesOnlyPushedFiles},
	{"Excludes", testExcludes},
	{"TamperedManifest", testTamperedManifest},
	{"ModeAndMtimeOnlyChange", testModeOnlyChange},
	{"InterruptedUpload", testInterruptedUpload},
	{"InterruptedCommitThenRevert", testInterruptedCommitThenRevert},
	{"MissingOrCorruptManifest", testMissingOrCorruptManifest},
	{"LeftoverTempCleaned", testLeftoverTempCleaned},
	{"TypeChanges", testTypeChanges},
	{"EditedAfterScan", testEditedAfterScan},
	{"SumLostThenRepaired", testSumLostThenRepaired},
	{"Deltas", testDeltas},
	{"Format1Upgraded", testFormat1Upgraded},
	{"VouchedButDisordered", testVouchedButDisordered},
	{"UploadDirEarly", testUploadDirEarly},
	{"MarkedOnceContentArrived", testMarkedOnceContentArrived},
	{"ManifestFromLocalCache", testManifestFromLocalCache},
	{"ManyFilesMixedModes", testManyFilesMixedModes},
	{"Streamed", testStreamed},
	{"StreamRefusedFallsBack", testStreamRefusedFallsBack},
	{"EditedDuringStream", testEditedDuringStream},
	{"StreamTreeBlocked", testStreamTreeBlocked},
	{"NewWorkdir", testNewWorkdir},
	{"RemoveDir", testRemoveDir},
}

func TestCoreOSFS(t *testing.T) {
	for _, tc := range coreTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			tc.fn(&env{t: t, local: t.TempDir(), fs: cluster.NewOSFS(home), dir: "jobs/work"})
		})
	}
}

var v1 = map[string]string{
	"train.py":          "print('v1')\n",
	"lib/model.py":      "class Model: pass\n",
	"lib/util/io.py":    "def load(): pass\n",
	"conf/base.yaml":    "lr: 0.1\n",
	"scripts/run.sh":    "#!/bin/sh\nexec python train.py\n",
	"empty.txt":         "",
	"data/labels.csv":   "a,b\n1,2\n",
	"lib/__init__.py":   "",
	"deep/a/b/c/d/e.py": "x = 1\n",
}

func (e *env) scan(opts Options) *Tree {
	e.t.Helper()
	tree, err := ScanLocal(e.local, opts)
	require.NoError(e.t, err)
	return tree
}

// push scans and syncs through fsys (e.fs when nil) and requires success.
func (e *env) push(fsys cluster.FS, opts Options) Result {
	e.t.Helper()
	if fsys == nil {
		fsys = e.fs
	}
	res, err := Sync(context.Background(), fsys, "h0", e.scan(opts), e.dir, opts)
	require.NoError(e.t, err)
	return res
}

func (e *env) remote() map[string]entry { return snapshot(e.t, e.fs, e.dir, true) }

// pushed is the snapshot the remote workdir must equal after pushing the
// local tree (no excludes), i.e. the local snapshot.
func (e *env) pushed() map[string]entry { return localSnapshot(e.t, e.local) }

func (e *env) writeRemote(p, content string) {
	e.t.Helper()
	full := path.Join(e.dir, p)
	require.NoError(e.t, e.fs.MkdirAll(path.Dir(full), 0o755))
	w, err := e.fs.Create(full)
	require.NoError(e.t, err)
	_, err = io.WriteString(w, content)
	require.NoError(e.t, err)
	require.NoError(e.t, w.Close())
}

func (e *env) readRemote(p string) (string, error) {
	r, err := e.fs.Open(path.Join(e.dir, p))
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

func testFirstPushThenNoop(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	require.NoError(t, os.Chmod(filepath.Join(e.local, "scripts/run.sh"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(e.local, "conf/base.yaml"), 0o600))
	require.NoError(t, os.Chmod(filepath.Join(e.local, "deep/a"), 0o700))

	res := e.push(nil, Options{})
	assert.Equal(t, len(v1), res.FilesSent)
	assert.Equal(t, 0, res.FilesUnchanged)
	assert.Equal(t, 0, res.FilesDeleted)
	var total int64
	for _, c := range v1 {
		total += int64(len(c))
	}
	assert.Equal(t, total, res.BytesSent)
	assert.Equal(t, e.pushed(), e.remote(), "remote tree (content, modes, mtimes) after the first push")
	_, err := e.fs.Lstat(path.Join(e.dir, tmpDir))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "temp dir left after a successful push: %v", err)

	// Nothing changed: only the manifest's sum is read (not the manifest),
	// nothing is written.
	c := newCountingFS(e.fs)
	res = e.push(c, Options{})
	assert.Equal(t, 0, res.FilesSent)
	assert.Equal(t, int64(0), res.BytesSent)
	assert.Equal(t, len(v1), res.FilesUnchanged)
	for _, o := range []op{opCreate, opRename, opRemove, opRemoveAll, opChmod, opChtimes, opMkdirAll, opReadDir} {
		assert.Zero(t, c.n(o), "%s calls in a no-op push", o)
	}
	assert.Equal(t, []string{path.Join(e.dir, sumName)}, c.opened, "files read by a no-op push")
	assert.Equal(t, 1, c.n(opStat), "Stat calls (the manifest's size)")
	assert.LessOrEqual(t, c.n(opLstat), 1, "Lstat calls (the temp dir)")
}

func testOneChangedFile(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})

	// Same size, same mtime, different content: the checksum decides.
	p := filepath.Join(e.local, "train.py")
	before, err := os.Stat(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte("print('v2')\n"), 0o644))
	require.NoError(t, os.Chtimes(p, before.ModTime(), before.ModTime()))

	c := newCountingFS(e.fs)
	res := e.push(c, Options{})
	assert.Equal(t, 1, res.FilesSent)
	assert.Equal(t, int64(len("print('v2')\n")), res.BytesSent)
	assert.Equal(t, len(v1)-1, res.FilesUnchanged)
	assert.Equal(t, 1, c.uploads(), "files uploaded")
	// The manifest is not written again: a delta over it says what
	// changed, and what is pending while files move into place goes in
	// the small journal.
	var state []string
	for _, p := range c.created {
		if !strings.Contains(p, tmpDir+"/f") {
			state = append(state, path.Base(p))
		}
	}
	assert.ElementsMatch(t, []string{"pending.json", "manifest.delta"}, state, "state files written")
	assert.Equal(t, 1, c.n(opSymlink), "the sum, a link")
	got, err := e.readRemote("train.py")
	require.NoError(t, err)
	assert.Equal(t, "print('v2')\n", got)
	assert.Equal(t, e.pushed(), e.remote())
}

func testDeleteRemovesOnlyPushedFiles(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	// The job writes its own files into the workdir, some of them inside
	// directories that push created.
	theirs := map[string]string{
		"checkpoints/step-100/model.pt": "weights",
		"logs/rank0.log":                "log",
		"lib/util/cache.bin":            "cache",
		"runs.txt":                      "r",
	}
	for p, c := range theirs {
		e.writeRemote(p, c)
	}
	require.NoError(t, os.Remove(filepath.Join(e.local, "train.py")))
	require.NoError(t, os.RemoveAll(filepath.Join(e.local, "lib")))  // holds cache.bin on the host
	require.NoError(t, os.RemoveAll(filepath.Join(e.local, "deep"))) // only pushed files

	res := e.push(nil, Options{})
	assert.Equal(t, 1+3+1, res.FilesDeleted) // train.py, lib/{model,__init__,util/io}.py, deep/a/b/c/d/e.py
	assert.Equal(t, 0, res.FilesSent)
	remote := e.remote()
	for p, c := range theirs {
		assert.Equal(t, c, remote[p].Content, "job file %s", p)
	}
	for _, gone := range []string{"train.py", "lib/model.py", "lib/util/io.py", "deep", "deep/a"} {
		assert.NotContains(t, remote, gone)
	}
	assert.Contains(t, remote, "lib/util", "a directory still holding the job's files stays")
	// Apart from the job's files the remote is exactly the local tree.
	for p := range remote {
		if _, ok := theirs[p]; ok || strings.HasPrefix(p, "checkpoints") || strings.HasPrefix(p, "logs") || p == "lib" || p == "lib/util" {
			delete(remote, p)
		}
	}
	assert.Equal(t, e.pushed(), remote)
}

func testExcludes(e *env) {
	t := e.t
	writeFiles(t, e.local, map[string]string{
		"train.py":             "x",
		"cache/a.pyc":          "pyc",
		"lib/b.pyc":            "pyc",
		"lib/keep.pyc":         "keep",
		"data/big.bin":         "big",
		"sub/data/small.txt":   "anchored pattern leaves this",
		"secret.txt":           "s",
		"lib/secret.txt":       "not anchored: pushed",
		".git/HEAD":            "ref",
		"vendor/.git":          "gitdir: ../.git/modules/vendor",
		"vendor/lib.py":        "v",
		"outputs/run1/log.txt": "o",
		".drover/whatever":     "reserved on the host",
		".droverignore":        "# build products\n*.pyc\n!keep.pyc\n/data/\n\noutputs/**\n",
	})
	res := e.push(nil, Options{Exclude: []string{"/secret.txt"}})
	remote := e.remote()
	var got []string
	for p, en := range remote {
		if !en.Dir {
			got = append(got, p)
		}
	}
	assert.ElementsMatch(t, []string{"train.py", "lib/keep.pyc", "sub/data/small.txt", "lib/secret.txt", "vendor/lib.py", ".droverignore"}, got)
	assert.Equal(t, 6, res.FilesSent)
	assert.True(t, remote["outputs"].Dir, "outputs/** excludes the contents, not the directory itself")
	_, err := e.readRemote(".drover/whatever")
	assert.True(t, errors.Is(err, fs.ErrNotExist), "local .drover must not be pushed: %v", err)
}

func testTamperedManifest(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	// A file outside the workdir that a tampered manifest points at.
	outside := path.Join(path.Dir(e.dir), "outside.txt")
	require.NoError(t, e.fs.MkdirAll(path.Dir(outside), 0o755))
	w, err := e.fs.Create(outside)
	require.NoError(t, err)
	_, err = io.WriteString(w, "precious")
	require.NoError(t, err)
	require.NoError(t, w.Close())

	for _, bad := range []string{"../outside.txt", "lib/../../outside.txt", "/etc/passwd", ".drover/manifest.json", "./train.py", "lib/"} {
		for _, format := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s format %d", bad, format), func(t *testing.T) {
				m := newManifest()
				m.Files[bad] = manifestFile{SHA256: strings.Repeat("0", 64), Size: 8, Mode: 0o644}
				data := encodeManifest(m)
				if format == 1 {
					m.Version = 1
					var err error
					data, err = json.Marshal(m)
					require.NoError(t, err)
				}
				e.writeRemote(manifestName, string(data))

				res, err := Sync(context.Background(), e.fs, "h0", e.scan(Options{}), e.dir, Options{})
				require.NoError(t, err)
				assert.Equal(t, 0, res.FilesDeleted)
				require.Len(t, res.Warnings, 1)
				assert.Contains(t, res.Warnings[0], "refusing path")
				r, err := e.fs.Open(outside)
				require.NoError(t, err, "file outside the workdir")
				got, _ := io.ReadAll(r)
				r.Close()
				assert.Equal(t, "precious", string(got))
				// The manifest was rewritten and is trusted again.
				res = e.push(nil, Options{})
				assert.Empty(t, res.Warnings)
				assert.Equal(t, len(v1), res.FilesUnchanged)
			})
		}
	}
}

func testModeOnlyChange(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	require.NoError(t, os.Chmod(filepath.Join(e.local, "train.py"), 0o700))
	mt := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(e.local, "lib/model.py"), mt, mt))
	require.NoError(t, os.Chmod(filepath.Join(e.local, "lib"), 0o750))

	c := newCountingFS(e.fs)
	res := e.push(c, Options{})
	assert.Equal(t, 0, res.FilesSent)
	assert.Equal(t, int64(0), res.BytesSent)
	assert.Equal(t, 0, c.uploads())
	assert.Equal(t, e.pushed(), e.remote())
}

// testInterruptedUpload cuts the "connection" after K bytes of uploads, at
// several points, and checks that the old tree is intact byte for byte
// (including files the job wrote) and that the next push completes.
func testInterruptedUpload(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	e.writeRemote("checkpoints/ck.pt", "ck")
	old := snapshot(t, e.fs, e.dir, true)

	v2 := map[string]string{
		"train.py":      "print('v2')\n",
		"lib/model.py":  strings.Repeat("m", 300_000),
		"new/module.py": "new\n",
		"big.bin":       strings.Repeat("0123456789", 100_000),
	}
	writeFiles(t, e.local, v2)
	require.NoError(t, os.Remove(filepath.Join(e.local, "empty.txt")))

	for _, k := range []int64{0, 1, 40_000, 700_000, 1_000_000} {
		c := newCutFS(e.fs, k, 1<<30)
		_, err := Sync(context.Background(), c, "h0", e.scan(Options{}), e.dir, Options{Concurrency: 3})
		require.Error(t, err, "cut after %d bytes", k)
		assert.ErrorIs(t, err, errCut)
		assert.Contains(t, err.Error(), "push to h0: ")
		assert.Equal(t, old, snapshot(t, e.fs, e.dir, true), "tree after a push cut after %d bytes", k)
	}
	res := e.push(nil, Options{})
	assert.Equal(t, len(v2), res.FilesSent)
	assert.Equal(t, 1, res.FilesDeleted)
	want := e.pushed()
	want["checkpoints"] = old["checkpoints"]
	want["checkpoints/ck.pt"] = old["checkpoints/ck.pt"]
	assert.Equal(t, want, e.remote())
	_, err := e.fs.Lstat(path.Join(e.dir, tmpDir))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "temp dir after a completed push: %v", err)
}

// testInterruptedCommitThenRevert cuts the connection after some renames
// (a mixed tree) and then pushes the old version again: the pending
// manifest must make push re-send what may have changed, so the host ends
// up with the old version rather than trusting a stale manifest.
func testInterruptedCommitThenRevert(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	want := e.remote()

	writeFiles(t, e.local, map[string]string{"train.py": "v2", "lib/model.py": "v2", "conf/base.yaml": "v2"})
	c := newCutFS(e.fs, 1<<40, 2) // the journal's rename and one file's
	_, err := Sync(context.Background(), c, "h0", e.scan(Options{}), e.dir, Options{Concurrency: 1})
	require.ErrorIs(t, err, errCut)
	// Cut between renames: the journal says what is in doubt, and no sum
	// vouches for the old manifest.
	_, err = e.readRemote(journalName)
	assert.NoError(t, err, "journal after a cut commit")
	_, err = e.fs.Lstat(path.Join(e.dir, sumName))
	assert.ErrorIs(t, err, fs.ErrNotExist, "sum after a cut commit")

	writeFiles(t, e.local, v1) // back to v1, same mtimes as before
	res := e.push(nil, Options{})
	assert.GreaterOrEqual(t, res.FilesSent, 1)
	assert.Equal(t, want, e.remote())
}

func testMissingOrCorruptManifest(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	e.writeRemote("checkpoints/ck.pt", "ck")
	require.NoError(t, os.Remove(filepath.Join(e.local, "train.py")))

	for _, tc := range []struct {
		name     string
		manifest *string // nil: remove it
		warn     bool
	}{
		{"missing", nil, false},
		{"garbage", ptr("{not json"), true},
		{"wrong version", ptr(`{"version": 99, "files": {}}`), true},
		{"bad hash", ptr(`{"version": 1, "files": {"x": {"sha256": "zz", "size": 1, "mode": 420}}}`), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.manifest == nil {
				require.NoError(t, e.fs.Remove(path.Join(e.dir, manifestName)))
			} else {
				e.writeRemote(manifestName, *tc.manifest)
			}
			res, err := Sync(context.Background(), e.fs, "h0", e.scan(Options{}), e.dir, Options{})
			require.NoError(t, err)
			assert.Equal(t, tc.warn, len(res.Warnings) > 0, "warnings: %q", res.Warnings)
			// Size and mtime match on the host, so nothing is re-sent;
			// without a manifest nothing can be deleted.
			assert.Equal(t, 0, res.FilesSent)
			assert.Equal(t, 0, res.FilesDeleted)
			_, err = e.readRemote("train.py")
			assert.NoError(t, err, "train.py must survive a push without a manifest")
			got, err := e.readRemote("checkpoints/ck.pt")
			require.NoError(t, err)
			assert.Equal(t, "ck", got)
		})
	}
	// A file changed on the host behind push's back (different size) is
	// re-sent when there is no manifest to trust.
	require.NoError(t, e.fs.Remove(path.Join(e.dir, manifestName)))
	e.writeRemote("lib/model.py", "tampered on the host")
	res := e.push(nil, Options{})
	assert.Equal(t, 1, res.FilesSent)
	got, err := e.readRemote("lib/model.py")
	require.NoError(t, err)
	assert.Equal(t, v1["lib/model.py"], got)
}

func ptr(s string) *string { return &s }

func testLeftoverTempCleaned(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	e.writeRemote(tmpDir+"/f000001", "half an upload")
	e.writeRemote(tmpDir+"/manifest.json", "{")
	res := e.push(nil, Options{})
	assert.Equal(t, 0, res.FilesSent)
	_, err := e.fs.Lstat(path.Join(e.dir, tmpDir))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "leftover temp dir: %v", err)
}

// testTypeChanges turns a file into a directory and a directory into a file.
func testTypeChanges(e *env) {
	t := e.t
	writeFiles(t, e.local, map[string]string{"a": "file", "b/x": "in dir"})
	e.push(nil, Options{})
	require.NoError(t, os.Remove(filepath.Join(e.local, "a")))
	require.NoError(t, os.RemoveAll(filepath.Join(e.local, "b")))
	writeFiles(t, e.local, map[string]string{"a/y": "now a dir", "b": "now a file"})
	res := e.push(nil, Options{})
	assert.Equal(t, 2, res.FilesSent)
	assert.Equal(t, 2, res.FilesDeleted)
	assert.Equal(t, e.pushed(), e.remote())
}

func TestSymlinks(t *testing.T) {
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600))

	tests := []struct {
		name     string
		links    map[string]string // link path -> target
		exclude  []string
		wantErr  []string          // substrings; nil = success
		want     map[string]string // pushed file -> content
		wantWarn []string          // substrings of the tree's warnings, in order
	}{
		{
			name:  "inside file and directory are copied",
			links: map[string]string{"alias.py": "train.py", "libcopy": "lib", "lib/up.py": "../train.py"},
			want: map[string]string{"train.py": "t", "lib/m.py": "m", "alias.py": "t",
				"libcopy/m.py": "m", "libcopy/up.py": "t", "lib/up.py": "t"},
		},
		{
			name:    "absolute link outside is refused",
			links:   map[string]string{"data": outside},
			wantErr: []string{"symlink data -> " + outside, "points outside the code directory"},
		},
		{
			name:    "relative link escaping is refused",
			links:   map[string]string{"lib/s": "../../../../../../../../" + filepath.Join(outside, "secret")},
			wantErr: []string{"symlink lib/s -> ../../", "points outside the code directory"},
		},
		{
			name:    "excluded outside link is skipped",
			links:   map[string]string{"data": outside},
			exclude: []string{"data"},
			want:    map[string]string{"train.py": "t", "lib/m.py": "m"},
		},
		{
			// Issue 21: a dangling link aborted the whole push.
			name:     "dangling link is skipped with a warning",
			links:    map[string]string{"gone": "nowhere", "lib/venv": "/nonexistent/python3"},
			want:     map[string]string{"train.py": "t", "lib/m.py": "m"},
			wantWarn: []string{"symlink gone -> nowhere: its target does not exist; skipped", "symlink lib/venv -> /nonexistent/python3"},
		},
		{
			name:    "loop is refused",
			links:   map[string]string{"lib/again": ".."},
			wantErr: []string{"symlink lib/again -> ..", "loops"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"train.py": "t", "lib/m.py": "m"})
			for l, target := range tc.links {
				require.NoError(t, os.Symlink(target, filepath.Join(dir, l)))
			}
			tree, err := ScanLocal(dir, Options{Exclude: tc.exclude})
			if tc.wantErr != nil {
				require.Error(t, err)
				for _, s := range tc.wantErr {
					assert.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			require.Len(t, tree.Warnings, len(tc.wantWarn), "%q", tree.Warnings)
			for i, w := range tc.wantWarn {
				assert.Contains(t, tree.Warnings[i], w)
			}
			home := t.TempDir()
			_, err = Sync(context.Background(), cluster.NewOSFS(home), "h0", tree, "w", Options{})
			require.NoError(t, err)
			got := map[string]string{}
			for p, en := range snapshot(t, cluster.NewOSFS(home), "w", true) {
				if !en.Dir {
					got[p] = en.Content
				}
			}
			assert.Equal(t, tc.want, got)
			// Links arrive as regular files.
			info, err := os.Lstat(filepath.Join(home, "w", "alias.py"))
			if err == nil {
				assert.True(t, info.Mode().IsRegular())
			}
		})
	}
}

func TestScanLocalErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := ScanLocal(filepath.Join(dir, "nope"), Options{})
	assert.ErrorIs(t, err, fs.ErrNotExist)

	require.NoError(t, os.WriteFile(filepath.Join(dir, ".droverignore"), []byte("ok\n[bad\n"), 0o644))
	_, err = ScanLocal(dir, Options{})
	require.Error(t, err)
	var pe *PatternError
	require.ErrorAs(t, err, &pe, "bad .droverignore pattern")
	realDir, rerr := filepath.EvalSymlinks(dir)
	require.NoError(t, rerr)
	assert.Equal(t, PatternError{File: filepath.Join(realDir, ".droverignore"), Line: 2, Pattern: "[bad", Fix: patternFix}, noErr(pe))
	assert.Contains(t, err.Error(), ".droverignore:2: bad pattern")

	require.NoError(t, os.Remove(filepath.Join(dir, ".droverignore")))
	_, err = ScanLocal(dir, Options{Exclude: []string{"a", "b[", "c"}})
	require.ErrorAs(t, err, &pe, "bad job.exclude pattern")
	assert.Equal(t, PatternError{Key: "job.exclude[1]", Pattern: "b[", Fix: patternFix}, noErr(pe))
	assert.Contains(t, err.Error(), "job.exclude[1]")
}

// noErr is e without the error it wraps, to compare its fields.
func noErr(e *PatternError) PatternError {
	c := *e
	c.Err = nil
	return c
}

func TestSyncRefusesEmptyWorkdir(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a": "a"})
	tree, err := ScanLocal(dir, Options{})
	require.NoError(t, err)
	for _, wd := range []string{"", "  "} {
		_, err = Sync(context.Background(), cluster.NewOSFS(t.TempDir()), "h0", tree, wd, Options{})
		assert.ErrorContains(t, err, "no workdir")
	}
}

// denyFS refuses to create files, as a host whose workdir is not writable.
type denyFS struct{ cluster.FS }

func (d denyFS) Create(p string) (io.WriteCloser, error) {
	return nil, &fs.PathError{Op: "open", Path: "/home/u/" + p, Err: fs.ErrPermission}
}

func TestSyncErrorNamesHostAndFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"train.py": "x"})
	tree, err := ScanLocal(dir, Options{})
	require.NoError(t, err)
	var last Progress
	opts := Options{Progress: func(p Progress) { last = p }}
	_, err = Sync(context.Background(), denyFS{cluster.NewOSFS(t.TempDir())}, "h3 (10.0.0.13)", tree, "w", opts)
	require.Error(t, err)
	assert.Equal(t, "push to h3 (10.0.0.13): upload train.py: permission denied", err.Error())
	assert.Equal(t, PhaseFailed, last.Phase, "a failed push reports it")
	assert.ErrorIs(t, err, fs.ErrPermission)
}

func TestSyncCancelled(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, v1)
	tree, err := ScanLocal(dir, Options{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	home := t.TempDir()
	_, err = Sync(ctx, cluster.NewOSFS(home), "h0", tree, "w", Options{})
	assert.ErrorIs(t, err, context.Canceled)
	entries, _ := os.ReadDir(filepath.Join(home, "w"))
	for _, en := range entries {
		assert.Equal(t, stateDir, en.Name(), "nothing but drover's state after a cancelled first push")
	}
}

func TestProgressReports(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, v1)
	tree, err := ScanLocal(dir, Options{})
	require.NoError(t, err)
	var last Progress
	phases := map[Phase]bool{}
	opts := Options{Progress: func(p Progress) { last = p; phases[p.Phase] = true }}
	res, err := Sync(context.Background(), cluster.NewOSFS(t.TempDir()), "h0", tree, "w", opts)
	require.NoError(t, err)
	assert.Equal(t, Progress{Host: "h0", Phase: PhaseDone, FilesDone: len(v1), FilesTotal: len(v1),
		BytesDone: res.BytesSent, BytesTotal: tree.Bytes}, last)
	assert.Equal(t, map[Phase]bool{PhaseCompare: true, PhaseUpload: true, PhaseCommit: true, PhaseDone: true}, phases)
}

func TestValidRel(t *testing.T) {
	for _, tc := range []struct {
		p  string
		ok bool
	}{
		{"a", true}, {"a/b.py", true}, {"..a/b", true}, {"a/.drover", true}, {"a..b", true},
		{"", false}, {".", false}, {"..", false}, {"../a", false}, {"a/../../b", false}, {"a/..", false},
		{"/etc/passwd", false}, {"a//b", false}, {"a/./b", false}, {"a/", false},
		{".drover", false}, {".drover/manifest.json", false}, {"a\x00b", false},
	} {
		err := validRel(tc.p)
		assert.Equal(t, tc.ok, err == nil, "validRel(%q) = %v", tc.p, err)
	}
}

// A file edited between the scan and its upload is refused, and the host
// keeps the previous tree whole.
func testEditedAfterScan(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	old := e.remote()

	writeFiles(t, e.local, map[string]string{"train.py": "print('v2')\n", "lib/model.py": "class Model: v = 2\n"})
	tree := e.scan(Options{})
	p := filepath.Join(e.local, "lib", "model.py")
	require.NoError(t, os.WriteFile(p, []byte("class Model: v = 3, edited\n"), 0o644))
	require.NoError(t, os.Chtimes(p, time.Now().Add(time.Hour), time.Now().Add(time.Hour)))

	_, err := Sync(context.Background(), e.fs, "h0", tree, e.dir, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lib/model.py")
	assert.Contains(t, err.Error(), "changed while it was being pushed")
	assert.Equal(t, old, e.remote(), "the host must keep the previous tree")
}

// testSumLostThenRepaired: without manifest.sum (lost, or a sum of
// format 1, which promised something else) a push reads the manifest
// (base and delta), finds nothing to do and writes the sum, so that the
// next push reads only the sum again.
func testSumLostThenRepaired(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	writeFiles(t, e.local, map[string]string{"train.py": "print('v2')\n"})
	e.push(nil, Options{}) // a delta over the first push's manifest
	tree := e.scan(Options{})
	want, err := e.fs.Readlink(path.Join(e.dir, sumName))
	require.NoError(t, err)
	sum := hostSum(e.fs, e.dir)
	require.Equal(t, tree.key, sum.tree)
	require.NotEqual(t, tree.key, sum.base, "the second push wrote a delta")
	require.Equal(t, sum.String(), want)

	wrongSize := sum
	wrongSize.baseSize++
	for _, bad := range []string{"", strings.Repeat("0", 64) + " 12\n", "v2 " + tree.key, "v2 " + tree.key + " " + strings.Repeat("x", 64) + " 1",
		wrongSize.String()} {
		require.NoError(t, e.fs.Remove(path.Join(e.dir, sumName)))
		if bad != "" {
			require.NoError(t, e.fs.Symlink(bad, path.Join(e.dir, sumName)))
		}
		c := newCountingFS(e.fs)
		res := e.push(c, Options{})
		assert.Equal(t, 0, res.FilesSent, "sum %q", bad)
		assert.Empty(t, res.Warnings)
		assert.Contains(t, c.opened, path.Join(e.dir, manifestName), "without a sum the manifest is read")
		assert.Contains(t, c.opened, path.Join(e.dir, deltaName), "... and the delta")
		got, err := e.fs.Readlink(path.Join(e.dir, sumName))
		require.NoError(t, err)
		assert.Equal(t, want, got, "sum repaired")
		assert.Zero(t, c.n(opCreate), "nothing but the sum is written")

		c = newCountingFS(e.fs)
		e.push(c, Options{})
		assert.Equal(t, []string{path.Join(e.dir, sumName)}, c.opened)
	}

	// A sum in a regular file (format 1) is no promise either.
	require.NoError(t, e.fs.Remove(path.Join(e.dir, sumName)))
	e.writeRemote(sumName, want)
	res := e.push(nil, Options{})
	assert.Equal(t, 0, res.FilesSent)
	got, err := e.fs.Readlink(path.Join(e.dir, sumName))
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// testManifestFromLocalCache: the push that wrote a manifest keeps a copy
// in the local cache, so the next push takes the host's old manifest from
// there (the host's sum names it) instead of reading it from the host; a
// cached copy that does not match its name is not used.
func testManifestFromLocalCache(e *env) {
	t := e.t
	cache := t.TempDir()
	opts := Options{CacheDir: cache}
	writeFiles(t, e.local, v1)
	e.push(nil, opts)

	writeFiles(t, e.local, map[string]string{"train.py": "print('v2')\n"})
	c := newCountingFS(e.fs)
	res := e.push(c, opts)
	assert.Equal(t, 1, res.FilesSent)
	assert.NotContains(t, c.opened, path.Join(e.dir, manifestName), "the old manifest comes from the local cache")
	assert.Equal(t, e.pushed(), e.remote())

	// Corrupt every cached manifest: the host's is read instead.
	files := cachedManifests(t, cache)
	require.NotEmpty(t, files)
	for _, f := range files {
		require.NoError(t, os.WriteFile(f, []byte("garbage"), 0o600))
	}
	writeFiles(t, e.local, map[string]string{"train.py": "print('v3')\n"})
	c = newCountingFS(e.fs)
	res = e.push(c, opts)
	assert.Equal(t, 1, res.FilesSent)
	assert.Empty(t, res.Warnings)
	assert.Contains(t, c.opened, path.Join(e.dir, manifestName))
	assert.Equal(t, e.pushed(), e.remote())

	// Only the newest few are kept.
	for i := 0; i < cacheKeep+2; i++ {
		writeFiles(t, e.local, map[string]string{"train.py": strings.Repeat("v", i+4)})
		e.push(nil, opts)
	}
	assert.Len(t, cachedManifests(t, cache), cacheKeep)
}

// cachedManifests lists the manifest files of a local cache.
func cachedManifests(t *testing.T, cache string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cache, "manifests"))
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, filepath.Join(cache, "manifests", e.Name()))
		}
	}
	return out
}

// TestManifestReadOnceForHosts: hosts holding the same manifest share one
// read and decode of it within a push (one Tree).
func TestManifestReadOnceForHosts(t *testing.T) {
	local := t.TempDir()
	writeFiles(t, local, v1)
	home := cluster.NewOSFS(t.TempDir())
	tree, err := ScanLocal(local, Options{})
	require.NoError(t, err)
	for _, dir := range []string{"a", "b", "c"} {
		_, err := Sync(context.Background(), home, dir, tree, dir, Options{})
		require.NoError(t, err)
	}
	writeFiles(t, local, map[string]string{"train.py": "print('v2')\n"})
	tree, err = ScanLocal(local, Options{})
	require.NoError(t, err)
	c := newCountingFS(home)
	var wg sync.WaitGroup
	for _, dir := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := Sync(context.Background(), c, dir, tree, dir, Options{})
			assert.NoError(t, err)
			assert.Equal(t, 1, res.FilesSent)
		}()
	}
	wg.Wait()
	n := 0
	for _, p := range c.opened {
		if strings.HasSuffix(p, manifestName) {
			n++
		}
	}
	assert.Equal(t, 1, n, "manifest reads for three hosts holding the same one: %q", c.opened)
}

// TestDecodeFormat1: manifests of format 1 (JSON, gzipped or plain, as
// earlier drovers wrote them and people write them by hand) still read.
func TestDecodeFormat1(t *testing.T) {
	plain := `{"version": 1, "files": {"a.py": {"sha256": "` + strings.Repeat("ab", 32) + `", "size": 3, "mode": 420, "mtime_ns": 7},
		"b.py": {"size": 1, "mode": 384, "pending": true}}, "dirs": {"lib": {"mode": 493}}}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err := zw.Write([]byte(plain))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	for name, data := range map[string][]byte{"plain": []byte(plain), "gzip": gz.Bytes()} {
		m, err := decodeManifest(data)
		require.NoError(t, err, name)
		assert.Equal(t, map[string]manifestFile{
			"a.py": {SHA256: strings.Repeat("ab", 32), Size: 3, Mode: 0o644, MTime: 7},
			"b.py": {Size: 1, Mode: 0o600, Pending: true},
		}, m.Files, name)
		assert.Equal(t, map[string]manifestDir{"lib": {Mode: 0o755}}, m.Dirs, name)
		back, err := decodeManifest(encodeManifest(m))
		require.NoError(t, err, name)
		assert.Equal(t, m.Files, back.Files, "%s in format 2", name)
		assert.Equal(t, m.Dirs, back.Dirs, "%s in format 2", name)
	}
}

// testManyFilesMixedModes pushes enough files for the push to learn the
// host's mode for new files and skip chmod where it already matches: every
// file must still end up with its own mode, matching or not.
func testManyFilesMixedModes(e *env) {
	t := e.t
	files := map[string]string{}
	for i := 0; i < probeMin+8; i++ {
		files[fmt.Sprintf("pkg/m%02d.py", i)] = fmt.Sprintf("x = %d\n", i)
	}
	writeFiles(t, e.local, files)
	// The mode the host gives a new file, and one file of that mode.
	e.writeRemote("probe", "")
	info, err := e.fs.Lstat(path.Join(e.dir, "probe"))
	require.NoError(t, err)
	require.NoError(t, e.fs.Remove(path.Join(e.dir, "probe")))
	created := info.Mode().Perm()
	modes := []fs.FileMode{created, 0o755, 0o600, 0o640, 0o444}
	for i := 0; i < probeMin+8; i++ {
		require.NoError(t, os.Chmod(filepath.Join(e.local, fmt.Sprintf("pkg/m%02d.py", i)), modes[i%len(modes)]))
	}
	c := newCountingFS(e.fs)
	res := e.push(c, Options{})
	assert.Equal(t, probeMin+8, res.FilesSent)
	assert.Equal(t, e.pushed(), e.remote())
	same := 0
	for i := 0; i < probeMin+8; i++ {
		if modes[i%len(modes)] == created {
			same++
		}
	}
	// One chmod per file of another mode, one for the directory pkg.
	assert.Equal(t, probeMin+8-same+1, c.n(opChmod), "chmod calls (%d files already of mode %v)", same, created)
}

// streamTree writes n source files with modes a umask would change (0666,
// 0777) among others, enough for push to send them as one tar stream.
func streamTree(t *testing.T, dir string, n int) map[string]string {
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("src/p%d/m%03d.py", i%3, i)] = strings.Repeat(fmt.Sprintf("line %d\n", i), i*37)
	}
	// Names a plain tar header cannot hold (over 100 bytes, not ASCII).
	files["src/p0/"+strings.Repeat("long_directory_name/", 8)+"deep.py"] = "deep\n"
	files["src/p1/données ü 数据.txt"] = "unicode\n"
	writeFiles(t, dir, files)
	modes := []fs.FileMode{0o644, 0o666, 0o777, 0o600, 0o444, 0o750}
	i := 0
	for p := range files {
		require.NoError(t, os.Chmod(filepath.Join(dir, filepath.FromSlash(p)), modes[i%len(modes)]))
		i++
	}
	require.NoError(t, os.Chmod(filepath.Join(dir, "src", "p1"), 0o700))
	require.NoError(t, os.Chmod(filepath.Join(dir, "src", "p2"), 0o777))
	return files
}

// testStreamed: a push of many files goes as one tar stream and leaves
// exactly what file-by-file uploads leave: content, modes untouched by the
// host's umask, mtimes; then a one-file change goes over SFTP alone.
func testStreamed(e *env) {
	t := e.t
	files := streamTree(t, e.local, 3*streamMin)
	c := newStreamingCountingFS(t, e.fs)
	res := e.push(c, Options{})
	assert.True(t, res.streamed, "%d files were not streamed", len(files))
	assert.Empty(t, res.Warnings)
	assert.Equal(t, len(files), res.FilesSent)
	assert.Equal(t, e.scan(Options{}).Bytes, res.BytesSent)
	assert.Equal(t, e.pushed(), e.remote())
	// src is new and wholly sent: one rename moves it, plus the state
	// files', rather than one per file.
	assert.Less(t, c.n(opRename), 6, "renames for a first push of %d files in one new directory", len(files))
	assert.Zero(t, c.uploads(), "no file content goes over SFTP")
	_, err := e.fs.Lstat(path.Join(e.dir, tmpDir))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "temp dir after a streamed push: %v", err)

	// Changes in existing directories (staged flat) and a new directory
	// (staged whole) in one stream.
	more := map[string]string{}
	for i := range streamMin {
		more[fmt.Sprintf("src/p%d/m%03d.py", i%3, i)] = fmt.Sprintf("v2 %d\n", i)
		more[fmt.Sprintf("extra/sub%d/n%02d.py", i%2, i)] = fmt.Sprintf("new %d\n", i)
	}
	writeFiles(t, e.local, more)
	c = newStreamingCountingFS(t, e.fs)
	res = e.push(c, Options{})
	assert.True(t, res.streamed)
	assert.Equal(t, len(more), res.FilesSent)
	assert.Equal(t, e.pushed(), e.remote())
	assert.Less(t, c.n(opRename), streamMin+6, "the new directory extra moves in one rename")
	_, err = e.fs.Lstat(path.Join(e.dir, tmpDir))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "temp dir after a mixed streamed push: %v", err)

	writeFiles(t, e.local, map[string]string{"src/p0/m000.py": "changed\n"})
	res = e.push(nil, Options{})
	assert.False(t, res.streamed, "one file is cheaper over SFTP than a stream")
	assert.Equal(t, 1, res.FilesSent)
	assert.Equal(t, e.pushed(), e.remote())
}

// garbledTar is an FS whose ExtractTar hands the host's real tar a stream
// with its first header destroyed: a host whose tar cannot take drover's
// stream, failing early while drover is still sending.
type garbledTar struct {
	cluster.FS
	x extractor
}

func (g garbledTar) ExtractTar(ctx context.Context, dir string, r io.Reader) error {
	return g.x.ExtractTar(ctx, dir, io.MultiReader(strings.NewReader(strings.Repeat("not a tar ", 300)), r))
}

// testStreamRefusedFallsBack: when the host's tar fails, push says so and
// sends the same files over SFTP, counting each once.
func testStreamRefusedFallsBack(e *env) {
	t := e.t
	files := streamTree(t, e.local, 2*streamMin)
	x, ok := e.fs.(extractor)
	require.True(t, ok, "%T cannot stream", e.fs)
	res := e.push(garbledTar{FS: e.fs, x: x}, Options{})
	assert.False(t, res.streamed)
	require.Len(t, res.Warnings, 1)
	assert.Contains(t, res.Warnings[0], "one by one over SFTP")
	assert.Contains(t, res.Warnings[0], "exited", "the warning says how tar failed")
	t.Log(res.Warnings[0])
	assert.Equal(t, len(files), res.FilesSent)
	assert.Equal(t, e.scan(Options{}).Bytes, res.BytesSent)
	assert.Equal(t, e.pushed(), e.remote())
}

// testEditedDuringStream: a file that changes between the scan and its
// turn in the stream fails the push, which leaves the previous tree, and
// nothing falls back to SFTP.
func testEditedDuringStream(e *env) {
	t := e.t
	writeFiles(t, e.local, v1)
	e.push(nil, Options{})
	old := e.remote()
	streamTree(t, e.local, 2*streamMin)
	for _, edit := range []string{"shorter", strings.Repeat("longer ", 5000)} {
		tree := e.scan(Options{})
		p := filepath.Join(e.local, "src", "p1", "m010.py")
		require.NoError(t, os.WriteFile(p, []byte(edit), 0o644))
		res, err := Sync(context.Background(), e.fs, "h0", tree, e.dir, Options{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "src/p1/m010.py: the file changed while it was being pushed")
		assert.Empty(t, res.Warnings, "no fallback for a local failure")
		assert.Equal(t, old, e.remote(), "the host must keep the previous tree")
		_, err = e.fs.Lstat(path.Join(e.dir, tmpDir))
		assert.True(t, errors.Is(err, fs.ErrNotExist), "temp dir after a failed stream: %v", err)
	}
}

// testStreamTreeBlocked: a new directory that the host already has, with
// the job's files in it, cannot be moved into place whole; its files are
// moved one by one and the job's file stays.
func testStreamTreeBlocked(e *env) {
	t := e.t
	streamTree(t, e.local, 2*streamMin)
	e.writeRemote("src/p2/job-output.txt", "keep me")
	res := e.push(nil, Options{})
	assert.True(t, res.streamed)
	want := e.pushed()
	got := e.remote()
	assert.Equal(t, entry{Content: "keep me", Mode: got["src/p2/job-output.txt"].Mode, MTime: got["src/p2/job-output.txt"].MTime}, got["src/p2/job-output.txt"])
	delete(got, "src/p2/job-output.txt")
	assert.Equal(t, want, got)
	_, err := e.fs.Lstat(path.Join(e.dir, tmpDir))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "temp dir after a push whose tree could not move whole: %v", err)
}
