package push

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// The decision a read that saw a file change leads to: a few reads, then
// a snapshot when it is small enough, else skipping it.
func TestOnChange(t *testing.T) {
	for _, tc := range []struct {
		tries     int
		size, max int64
		want      changeAction
	}{
		{1, 10, 100, readAgain},
		{steadyTries - 1, 10, 100, readAgain},
		{1, 1000, 100, readAgain}, // too large, but it may yet hold still
		{steadyTries, 10, 100, takeSnapshot},
		{steadyTries, 100, 100, takeSnapshot},
		{steadyTries, 0, 100, takeSnapshot},
		{steadyTries, 101, 100, skipFile},
		{steadyTries + 1, 101, 100, skipFile},
	} {
		assert.Equal(t, tc.want, onChange(tc.tries, tc.size, tc.max), "onChange(%d, %d, %d)", tc.tries, tc.size, tc.max)
	}
}

// appender is a readHook that appends a line to the file it is given
// each of the first n times it runs for it (n < 0: every time), as a log
// written while drover reads it.
type appender struct {
	dir   string
	n     int
	mu    sync.Mutex
	reads map[string]int
}

func (a *appender) hook(rel string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reads == nil {
		a.reads = map[string]int{}
	}
	a.reads[rel]++
	if a.n >= 0 && a.reads[rel] > a.n || !strings.HasSuffix(rel, ".log") {
		return
	}
	f, err := os.OpenFile(filepath.Join(a.dir, filepath.FromSlash(rel)), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(f, "line %d\n", a.reads[rel])
	f.Close()
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// A file that changes while the scan reads it: read again while it
// settles; still changing after steadyTries reads, pushed as a snapshot
// (the hosts get exactly what it held at one moment) or, larger than a
// snapshot may be, skipped and left alone on the hosts. Either way the
// push succeeds and Tree.Changing names the file once.
func TestScanChangingFile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		changes  int   // how many reads see a change (-1: all)
		snapMax  int64 // 0: the default
		want     string
		snapshot bool
		skipped  bool
	}{
		{name: "settles", changes: 1},
		{name: "settles at the last read", changes: steadyTries - 1},
		{name: "snapshot", changes: -1, snapshot: true},
		{name: "too large to snapshot", changes: -1, snapMax: 4, skipped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, remote := t.TempDir(), t.TempDir()
			writeFiles(t, local, map[string]string{"train.py": "print(1)\n", "run.log": "start\n"})
			// What the host had of run.log before: kept when skipped.
			hostFS := cluster.NewOSFS(remote)
			old, err := ScanLocal(local, Options{})
			require.NoError(t, err)
			_, err = Sync(context.Background(), hostFS, "h0", old, "w", Options{})
			require.NoError(t, err)

			a := &appender{dir: local, n: tc.changes}
			tree, err := scanLocal(local, Options{snapMax: tc.snapMax, readHook: a.hook}, time.Now())
			require.NoError(t, err)
			res, err := SyncSteady(context.Background(), hostFS, "h0", tree, "w", Options{})
			require.NoError(t, err)
			assert.Empty(t, res.Changing, "the scan took care of it")
			got, err := os.ReadFile(filepath.Join(remote, "w", "run.log"))
			require.NoError(t, err)
			now, err := os.ReadFile(filepath.Join(local, "run.log"))
			require.NoError(t, err)
			switch {
			case tc.skipped:
				require.Len(t, tree.Changing, 1)
				assert.Equal(t, "run.log", tree.Changing[0].Path)
				assert.Contains(t, tree.Changing[0].Skipped, "larger than")
				assert.Equal(t, "start\n", string(got), "left alone on the host")
				assert.True(t, tree.excluded("run.log", false))
			case tc.snapshot:
				require.Len(t, tree.Changing, 1)
				assert.Equal(t, Changing{Path: "run.log", Size: int64(len(got))}, tree.Changing[0])
				// The copy was taken after the last read's change: a
				// prefix of the file, and what the manifest vouches for.
				assert.True(t, strings.HasPrefix(string(now), string(got)), "%q is not a prefix of %q", got, now)
				assert.Equal(t, fmt.Sprintf("start\nline 1\nline 2\nline %d\n", steadyTries), string(got))
				assert.Equal(t, sha256Hex(string(got)), fileOf(t, tree, "run.log").SHA256)
			default:
				assert.Empty(t, tree.Changing)
				assert.Equal(t, string(now), string(got), "the settled file")
			}
			w := Changing{Path: "run.log", Size: 9}.Warning()
			assert.Contains(t, w, `exclude = ["/run.log"]`)
			assert.Contains(t, w, IgnoreFile)
		})
	}
}

func fileOf(t *testing.T, tree *Tree, rel string) File {
	t.Helper()
	for _, f := range tree.Files {
		if f.Path == rel {
			return f
		}
	}
	t.Fatalf("%s is not in the tree", rel)
	return File{}
}

// A file steady at the scan that changes before its upload: Sync refuses
// it (testEditedAfterScan), SyncSteady pushes again with a snapshot, once
// for every host (they share the derived tree), over SFTP-like uploads
// and a tar stream alike, and names it in Result.Changing.
func TestSyncSteadySnapshotsFileChangedAfterScan(t *testing.T) {
	for _, many := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", many), func(t *testing.T) {
			local := t.TempDir()
			files := map[string]string{"train.py": "print(1)\n", "run.log": "start\n"}
			if many {
				for i := range 2 * streamMin {
					files[fmt.Sprintf("src/m%03d.py", i)] = fmt.Sprint(i)
				}
			}
			writeFiles(t, local, files)
			tree, err := ScanLocal(local, Options{})
			require.NoError(t, err)
			require.Empty(t, tree.Changing)
			require.NoError(t, os.WriteFile(filepath.Join(local, "run.log"), []byte("start\nmore\n"), 0o644))

			// Two hosts at once, as a run pushes them.
			snaps := make([]*Tree, 2)
			var wg sync.WaitGroup
			for h := range snaps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					remote := t.TempDir()
					res, err := SyncSteady(context.Background(), cluster.NewOSFS(remote), fmt.Sprintf("h%d", h), tree, "w", Options{})
					assert.NoError(t, err)
					assert.Equal(t, []Changing{{Path: "run.log", Size: int64(len("start\nmore\n"))}}, res.Changing)
					assert.Equal(t, many, res.streamed)
					got, err := os.ReadFile(filepath.Join(remote, "w", "run.log"))
					assert.NoError(t, err)
					assert.Equal(t, "start\nmore\n", string(got))
					assert.NotSame(t, tree, res.Tree)
					snaps[h] = res.Tree
				}()
			}
			wg.Wait()
			assert.Same(t, snaps[0], snaps[1], "one snapshot for every host")
			assert.Equal(t, sha256Hex("start\nmore\n"), fileOf(t, snaps[0], "run.log").SHA256)
		})
	}
}

// drover's own output redirected into the code directory (`drover run >
// out.log`), found by the file's identity (fstat) rather than a name, is never pushed and is left alone on a host that got it before;
// an output elsewhere, or one that is not a regular file, changes nothing.
func TestOwnOutputsNotPushed(t *testing.T) {
	local, other := t.TempDir(), t.TempDir()
	writeFiles(t, local, map[string]string{"train.py": "print(1)\n", "out.log": "old output\n"})
	require.NoError(t, os.WriteFile(filepath.Join(other, "elsewhere.log"), nil, 0o644))
	stat := func(p string) fs.FileInfo {
		st, err := os.Stat(p)
		require.NoError(t, err)
		return st
	}
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	defer pw.Close()
	devNull, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer devNull.Close()
	outFile, err := os.OpenFile(filepath.Join(local, "out.log"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer outFile.Close()
	assert.Len(t, regularOutputs(pw, devNull, nil), 0, "a pipe and /dev/null are no output files")
	require.Len(t, regularOutputs(pw, outFile), 1)

	for _, tc := range []struct {
		name    string
		outputs []fs.FileInfo
		pushed  bool
	}{
		{"none", nil, true},
		{"elsewhere", []fs.FileInfo{stat(filepath.Join(other, "elsewhere.log"))}, true},
		{"redirected", regularOutputs(pw, outFile), false},
		{"found by a stat", []fs.FileInfo{stat(filepath.Join(local, "out.log"))}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			remote := t.TempDir()
			// The host got out.log from an earlier push, before drover
			// wrote to it.
			before, err := os.ReadFile(filepath.Join(local, "out.log"))
			require.NoError(t, err)
			first, err := ScanLocal(local, Options{})
			require.NoError(t, err)
			_, err = Sync(context.Background(), cluster.NewOSFS(remote), "h0", first, "w", Options{})
			require.NoError(t, err)
			fmt.Fprintln(outFile, "drover's output")

			tree, err := ScanLocal(local, Options{Outputs: tc.outputs})
			require.NoError(t, err)
			names := map[string]bool{}
			for _, f := range tree.Files {
				names[f.Path] = true
			}
			assert.Equal(t, tc.pushed, names["out.log"])
			assert.True(t, names["train.py"])
			_, err = Sync(context.Background(), cluster.NewOSFS(remote), "h0", tree, "w", Options{})
			require.NoError(t, err)
			got, err := os.ReadFile(filepath.Join(remote, "w", "out.log"))
			require.NoError(t, err, "never deleted from the host")
			now, _ := os.ReadFile(filepath.Join(local, "out.log"))
			if tc.pushed {
				assert.Equal(t, string(now), string(got))
			} else {
				assert.Equal(t, string(before), string(got), "left alone")
			}
		})
	}
}
