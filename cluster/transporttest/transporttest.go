// Package transporttest is the conformance suite every cluster.Transport
// passes: the launcher drives SSH and local hosts through the same
// interface, so both must agree on exit codes, signals, quoting, working
// directories, streams, concurrency and file access, down to the byte.
//
// Use it from a transport's tests:
//
//	func TestLocalConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) cluster.Transport { ... })
//	}
package transporttest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// liveness bounds every command the suite runs, so a transport that hangs
// fails instead of stalling the test binary.
const liveness = 30 * time.Second

// Run runs the suite against the transports dial returns; dial is called
// once per subtest and the transport is closed when it ends.
func Run(t *testing.T, dial func(t *testing.T) cluster.Transport) {
	t.Helper()
	open := func(t *testing.T) cluster.Transport {
		tr := dial(t)
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	t.Run("ExitCodes", func(t *testing.T) { testExitCodes(t, open(t)) })
	t.Run("Signals", func(t *testing.T) { testSignals(t, open(t)) })
	t.Run("Args", func(t *testing.T) { testArgs(t, open(t)) })
	t.Run("Env", func(t *testing.T) { testEnv(t, open(t)) })
	t.Run("Dir", func(t *testing.T) { testDir(t, open(t)) })
	t.Run("Stdin", func(t *testing.T) { testStdin(t, open(t)) })
	t.Run("StdinOpenAfterExit", func(t *testing.T) { testStdinOpenAfterExit(t, open(t)) })
	t.Run("Streams", func(t *testing.T) { testStreams(t, open(t)) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, open(t)) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, open(t)) })
	t.Run("Shell", func(t *testing.T) { testShell(t, open(t)) })
	t.Run("Signal", func(t *testing.T) { testSignal(t, open(t)) })
	t.Run("FS", func(t *testing.T) { testFS(t, open(t)) })
	t.Run("ExtractTar", func(t *testing.T) { testExtractTar(t, open(t)) })
}

// result is one finished command.
type result struct {
	stdout, stderr string
	err            error
}

// runCmd starts c on tr and waits for it within the liveness bound.
func runCmd(t *testing.T, tr cluster.Transport, c cluster.Cmd) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if c.Stdout == nil {
		c.Stdout = &stdout
	}
	if c.Stderr == nil {
		c.Stderr = &stderr
	}
	p, err := tr.Start(ctx, c)
	require.NoError(t, err, "start %q", c.Args)
	err = p.Wait()
	require.NoError(t, ctx.Err(), "%q did not finish within %v", c.Args, liveness)
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func sh(script string, args ...string) []string {
	return append([]string{"sh", "-c", script, "sh"}, args...)
}

func testExitCodes(t *testing.T, tr cluster.Transport) {
	for _, code := range []int{0, 1, 3, 42, 255} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			r := runCmd(t, tr, cluster.Cmd{Args: sh(fmt.Sprintf("exit %d", code))})
			if code == 0 {
				require.NoError(t, r.err)
				return
			}
			var ee *cluster.ExitError
			require.ErrorAs(t, r.err, &ee)
			assert.Equal(t, code, ee.Code)
			assert.Empty(t, ee.Signal)
			assert.Equal(t, tr.Host().Name, ee.Host)
			assert.False(t, cluster.IsConnectionLost(r.err))
		})
	}
}

func testSignals(t *testing.T, tr cluster.Transport) {
	for _, tc := range []struct {
		sig  string
		code int
	}{{"KILL", 137}, {"TERM", 143}, {"HUP", 129}} {
		t.Run(tc.sig, func(t *testing.T) {
			r := runCmd(t, tr, cluster.Cmd{Args: sh("kill -" + tc.sig + " $$")})
			var ee *cluster.ExitError
			require.ErrorAs(t, r.err, &ee)
			assert.Equal(t, tc.code, ee.Code)
			assert.Equal(t, tc.sig, ee.Signal)
			assert.Equal(t, tr.Host().Name, ee.Host)
		})
	}
}

// hostile are strings that break naive quoting: each must reach the program
// exactly as given.
var hostile = []string{
	"",
	" ",
	"plain",
	"two words",
	"it's",
	`"double"`,
	"$(echo injected)",
	"`echo injected`",
	"$HOME",
	"${PATH}",
	"a\nb\n",
	"\ttab",
	"back\\slash\\",
	"semi;colon && true || false | cat > /tmp/x",
	"*",
	"~",
	"-n",
	"'",
	"''",
	"\\'",
	"ünïcødé ✓",
	"!event",
	"#comment",
	"x=y",
	"%s%d",
}

// decodeNUL splits printf '%s\0' output back into the words.
func decodeNUL(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\x00"), "\x00")
}

func testArgs(t *testing.T, tr cluster.Transport) {
	// printf reuses its format for every argument: one NUL-terminated
	// record each, so empty strings and newlines survive the round trip.
	r := runCmd(t, tr, cluster.Cmd{Args: append([]string{"printf", `%s\0`}, hostile...)})
	require.NoError(t, r.err, "stderr: %s", r.stderr)
	assert.Equal(t, hostile, decodeNUL(r.stdout))

	// The program name itself may need quoting too.
	r = runCmd(t, tr, cluster.Cmd{Args: sh(`printf '%s\0' "$@"`, hostile...)})
	require.NoError(t, r.err, "stderr: %s", r.stderr)
	assert.Equal(t, hostile, decodeNUL(r.stdout))
}

func testEnv(t *testing.T, tr cluster.Transport) {
	env := map[string]string{}
	var names []string
	for i, v := range hostile {
		name := fmt.Sprintf("DROVER_TT_%d", i)
		env[name] = v
		names = append(names, name)
	}
	r := runCmd(t, tr, cluster.Cmd{
		Args: sh(`for n in "$@"; do eval "printf '%s\0' \"\${$n}\""; done`, names...),
		Env:  env,
	})
	require.NoError(t, r.err, "stderr: %s", r.stderr)
	assert.Equal(t, hostile, decodeNUL(r.stdout))

	// The login environment is kept: PATH still finds programs, HOME is set.
	r = runCmd(t, tr, cluster.Cmd{Args: sh(`printf %s "$HOME"`), Env: map[string]string{"X": "1"}})
	require.NoError(t, r.err)
	home := homeOf(t, tr)
	assert.Equal(t, home, r.stdout)

	// An invalid name is refused, never passed to a shell.
	_, err := tr.Start(context.Background(), cluster.Cmd{Args: []string{"true"}, Env: map[string]string{"A;touch /tmp/pwned;B": "x"}})
	assert.Error(t, err)
}

func homeOf(t *testing.T, tr cluster.Transport) string {
	t.Helper()
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	home, err := fsys.Home()
	require.NoError(t, err)
	require.True(t, path.IsAbs(home), "home %q is not absolute", home)
	return home
}

// scratch makes a fresh directory under the host's home, removed at the end.
func scratch(t *testing.T, tr cluster.Transport) (cluster.FS, string) {
	t.Helper()
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	dir := "transporttest-" + hex.EncodeToString(b)
	require.NoError(t, fsys.MkdirAll(dir, 0o755))
	t.Cleanup(func() { _ = fsys.RemoveAll(dir) })
	return fsys, dir
}

func testDir(t *testing.T, tr cluster.Transport) {
	fsys, dir := scratch(t, tr)
	home := homeOf(t, tr)
	sub := dir + "/with space/it's"
	require.NoError(t, fsys.MkdirAll(sub, 0o755))

	for _, tc := range []struct{ name, dir, want string }{
		{"empty is home", "", home},
		{"relative to home", sub, home + "/" + sub},
		{"absolute", home + "/" + dir, home + "/" + dir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCmd(t, tr, cluster.Cmd{Args: []string{"pwd", "-P"}, Dir: tc.dir})
			require.NoError(t, r.err, "stderr: %s", r.stderr)
			assert.Equal(t, tc.want+"\n", r.stdout)
		})
	}
}

// testStdinOpenAfterExit: Wait returns when the command exits even though
// its Stdin never reaches EOF. The launcher keeps a control channel open to
// every agent for the whole run; a Wait that waited for stdin to end would
// never report the exit.
func testStdinOpenAfterExit(t *testing.T, tr cluster.Transport) {
	pr, pw := io.Pipe()
	defer pw.Close()
	r := runCmd(t, tr, cluster.Cmd{Args: sh("exit 7"), Stdin: pr})
	var ee *cluster.ExitError
	require.ErrorAs(t, r.err, &ee)
	assert.Equal(t, 7, ee.Code)

	// A command that exits 0 while its stdin keeps coming succeeds,
	// whatever became of the write under way as the channel closed: SSH
	// once took that write's failure for a lost connection, exit status
	// 0 received or not (issue 37: a clean finish restarted).
	for i := range 10 {
		r := runCmd(t, tr, cluster.Cmd{Args: []string{"true"}, Stdin: endless{}})
		require.NoError(t, r.err, "run %d", i)
	}
}

// endless is a stdin that never ends: a line at every read.
type endless struct{}

func (endless) Read(p []byte) (int, error) { return copy(p, "ping\n"), nil }

func testStdin(t *testing.T, tr cluster.Transport) {
	data := make([]byte, 1<<20+17)
	_, _ = rand.Read(data)
	r := runCmd(t, tr, cluster.Cmd{Args: []string{"cat"}, Stdin: bytes.NewReader(data)})
	require.NoError(t, r.err)
	assert.True(t, bytes.Equal(data, []byte(r.stdout)), "stdin came back as %d bytes, want %d", len(r.stdout), len(data))

	// No Stdin means an empty one: the command sees EOF, never hangs.
	r = runCmd(t, tr, cluster.Cmd{Args: []string{"wc", "-c"}})
	require.NoError(t, r.err)
	assert.Equal(t, "0", strings.TrimSpace(r.stdout))
}

func testStreams(t *testing.T, tr cluster.Transport) {
	r := runCmd(t, tr, cluster.Cmd{Args: sh(`echo out1; echo err1 >&2; echo out2; echo err2 >&2; exit 5`)})
	assert.Equal(t, "out1\nout2\n", r.stdout)
	assert.Equal(t, "err1\nerr2\n", r.stderr)
	var ee *cluster.ExitError
	require.ErrorAs(t, r.err, &ee)
	assert.Equal(t, 5, ee.Code)

	// Nil writers discard output without blocking the command.
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	p, err := tr.Start(ctx, cluster.Cmd{Args: sh(`head -c 1000000 /dev/zero; head -c 1000000 /dev/zero >&2`)})
	require.NoError(t, err)
	require.NoError(t, p.Wait())
}

// SyncBuffer is a bytes.Buffer that a process's output copier and a test
// may use at once, so a test can read what a still-running command wrote.
// Any package's tests may use it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testConcurrent(t *testing.T, tr cluster.Transport) {
	const n = 50
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	outs := make([]SyncBuffer, n)
	procs := make([]cluster.Process, n)
	// All started before any is waited for: they run at once on one
	// transport.
	for i := range n {
		p, err := tr.Start(ctx, cluster.Cmd{
			Args:   sh(`sleep 1; printf '%s-%s' "$1" "$ID"; exit $(($1 % 7))`, fmt.Sprint(i)),
			Env:    map[string]string{"ID": fmt.Sprint(i * 3)},
			Stdout: &outs[i],
		})
		require.NoError(t, err, "start command %d", i)
		procs[i] = p
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Wait() }()
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "50 concurrent commands did not finish within %v", liveness)
	for i := range n {
		assert.Equal(t, fmt.Sprintf("%d-%d", i, i*3), outs[i].String(), "command %d", i)
		if i%7 == 0 {
			assert.NoError(t, errs[i], "command %d", i)
			continue
		}
		var ee *cluster.ExitError
		if assert.ErrorAs(t, errs[i], &ee, "command %d", i) {
			assert.Equal(t, i%7, ee.Code, "command %d", i)
		}
	}
}

func testCancel(t *testing.T, tr cluster.Transport) {
	ctx, cancel := context.WithCancel(context.Background())
	var out SyncBuffer
	p, err := tr.Start(ctx, cluster.Cmd{Args: sh(`echo started; exec sleep 60`), Stdout: &out})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return out.String() == "started\n" }, liveness, 10*time.Millisecond)
	cancel()
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return within 10s of cancelling the context")
	}

	// The transport is still usable after a cancelled command.
	r := runCmd(t, tr, cluster.Cmd{Args: []string{"true"}})
	assert.NoError(t, r.err)

	// A cancelled context refuses to start.
	_, err = tr.Start(ctx, cluster.Cmd{Args: []string{"true"}})
	assert.ErrorIs(t, err, context.Canceled)
}

func readAll(t *testing.T, fsys cluster.FS, p string) string {
	t.Helper()
	r, err := fsys.Open(p)
	require.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

func writeFile(t *testing.T, fsys cluster.FS, p, content string) {
	t.Helper()
	w, err := fsys.Create(p)
	require.NoError(t, err)
	_, err = io.Copy(w, strings.NewReader(content))
	require.NoError(t, err)
	require.NoError(t, w.Close())
}

func testFS(t *testing.T, tr cluster.Transport) {
	fsys, dir := scratch(t, tr)
	home := homeOf(t, tr)

	t.Run("CreateRead", func(t *testing.T) {
		big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
		writeFile(t, fsys, dir+"/a", big)
		assert.Equal(t, big, readAll(t, fsys, dir+"/a"))
		// Create truncates.
		writeFile(t, fsys, dir+"/a", "short")
		assert.Equal(t, "short", readAll(t, fsys, dir+"/a"))
		// Relative and absolute paths name the same file.
		assert.Equal(t, "short", readAll(t, fsys, home+"/"+dir+"/a"))
		// A command sees what the FS wrote.
		r := runCmd(t, tr, cluster.Cmd{Args: []string{"cat", dir + "/a"}})
		require.NoError(t, r.err)
		assert.Equal(t, "short", r.stdout)
	})

	t.Run("RenameOverExisting", func(t *testing.T) {
		writeFile(t, fsys, dir+"/old", "new content")
		writeFile(t, fsys, dir+"/target", "old content")
		require.NoError(t, fsys.Rename(dir+"/old", dir+"/target"))
		assert.Equal(t, "new content", readAll(t, fsys, dir+"/target"))
		_, err := fsys.Stat(dir + "/old")
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})

	t.Run("ChmodChtimesStat", func(t *testing.T) {
		writeFile(t, fsys, dir+"/m", "12345")
		require.NoError(t, fsys.Chmod(dir+"/m", 0o751))
		mtime := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
		require.NoError(t, fsys.Chtimes(dir+"/m", mtime, mtime))
		fi, err := fsys.Stat(dir + "/m")
		require.NoError(t, err)
		assert.Equal(t, "m", fi.Name())
		assert.Equal(t, int64(5), fi.Size())
		assert.Equal(t, fs.FileMode(0o751), fi.Mode().Perm())
		assert.True(t, fi.Mode().IsRegular())
		assert.True(t, mtime.Equal(fi.ModTime()), "mtime %v, want %v", fi.ModTime(), mtime)

		fi, err = fsys.Lstat(dir)
		require.NoError(t, err)
		assert.True(t, fi.IsDir())
	})

	t.Run("Mkdir", func(t *testing.T) {
		require.NoError(t, fsys.MkdirAll(dir+"/mk", 0o755))
		require.NoError(t, fsys.Mkdir(dir+"/mk/a", 0o755))
		fi, err := fsys.Lstat(dir + "/mk/a")
		require.NoError(t, err)
		assert.True(t, fi.IsDir())
		assert.Error(t, fsys.Mkdir(dir+"/mk/a", 0o755), "Mkdir of an existing directory")
		writeFile(t, fsys, dir+"/mk/f", "")
		assert.Error(t, fsys.Mkdir(dir+"/mk/f", 0o755), "Mkdir over a file")
		assert.Error(t, fsys.Mkdir(dir+"/mk/none/b", 0o755), "Mkdir without its parent")
		require.NoError(t, fsys.Mkdir(dir+"/mk/private", 0o700))
		fi, err = fsys.Stat(dir + "/mk/private")
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o700), fi.Mode().Perm())
	})

	testFSDirs(t, fsys, dir)
	testFSLinksAndRemoval(t, fsys, dir)
}

// testFSDirs checks MkdirAll and ReadDir.
func testFSDirs(t *testing.T, fsys cluster.FS, dir string) {
	t.Run("MkdirAllReadDir", func(t *testing.T) {
		require.NoError(t, fsys.MkdirAll(dir+"/d/e/f", 0o755))
		require.NoError(t, fsys.MkdirAll(dir+"/d/e/f", 0o755), "MkdirAll of an existing directory")
		writeFile(t, fsys, dir+"/d/z", "")
		writeFile(t, fsys, dir+"/d/b", "")
		fis, err := fsys.ReadDir(dir + "/d")
		require.NoError(t, err)
		var names []string
		for _, fi := range fis {
			names = append(names, fi.Name())
		}
		assert.Equal(t, []string{"b", "e", "z"}, names)
		fi, err := fsys.Stat(dir + "/d/e/f")
		require.NoError(t, err)
		assert.True(t, fi.IsDir())
		// MkdirAll over a file fails.
		assert.Error(t, fsys.MkdirAll(dir+"/d/z/sub", 0o755))
		assert.Error(t, fsys.MkdirAll(dir+"/d/z", 0o755))
		// A mode other than the default is applied to what it creates.
		require.NoError(t, fsys.MkdirAll(dir+"/d/private", 0o700))
		fi, err = fsys.Stat(dir + "/d/private")
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o700), fi.Mode().Perm())
	})

}

// testFSLinksAndRemoval checks symbolic links, removal and the errors for
// missing paths, and concurrent writes.
func testFSLinksAndRemoval(t *testing.T, fsys cluster.FS, dir string) {
	t.Run("Symlink", func(t *testing.T) {
		const target = "0123abcd 4567" // stored as given, never resolved
		require.NoError(t, fsys.Symlink(target, dir+"/link"))
		got, err := fsys.Readlink(dir + "/link")
		require.NoError(t, err)
		assert.Equal(t, target, got)
		fi, err := fsys.Lstat(dir + "/link")
		require.NoError(t, err)
		assert.Equal(t, fs.ModeSymlink, fi.Mode().Type())
		assert.Error(t, fsys.Symlink("other", dir+"/link"), "a link over an existing name")
		got, _ = fsys.Readlink(dir + "/link")
		assert.Equal(t, target, got, "the failed Symlink left the link as it was")
		_, err = fsys.Readlink(dir + "/missing")
		assert.ErrorIs(t, err, fs.ErrNotExist)
		writeFile(t, fsys, dir+"/plain", "x")
		_, err = fsys.Readlink(dir + "/plain")
		assert.Error(t, err, "Readlink of a regular file")
		assert.NotErrorIs(t, err, fs.ErrNotExist)
		require.NoError(t, fsys.Remove(dir+"/link"))
		_, err = fsys.Lstat(dir + "/link")
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})

	t.Run("RemoveAndNotExist", func(t *testing.T) {
		writeFile(t, fsys, dir+"/r", "x")
		require.NoError(t, fsys.Remove(dir+"/r"))
		for _, op := range []struct {
			name string
			fn   func() error
		}{
			{"stat", func() error { _, err := fsys.Stat(dir + "/r"); return err }},
			{"lstat", func() error { _, err := fsys.Lstat(dir + "/r"); return err }},
			{"open", func() error { _, err := fsys.Open(dir + "/r"); return err }},
			{"readdir", func() error { _, err := fsys.ReadDir(dir + "/nodir"); return err }},
			{"remove", func() error { return fsys.Remove(dir + "/r") }},
			{"rename", func() error { return fsys.Rename(dir+"/r", dir+"/r2") }},
			{"chmod", func() error { return fsys.Chmod(dir+"/r", 0o644) }},
			{"create in missing dir", func() error { _, err := fsys.Create(dir + "/nodir/f"); return err }},
		} {
			err := op.fn()
			assert.True(t, errors.Is(err, fs.ErrNotExist), "%s of a missing path: got %v, want fs.ErrNotExist", op.name, err)
		}
		require.NoError(t, fsys.MkdirAll(dir+"/tree/a/b", 0o755))
		writeFile(t, fsys, dir+"/tree/a/b/f", "x")
		writeFile(t, fsys, dir+"/tree/g", "x")
		require.NoError(t, fsys.RemoveAll(dir+"/tree"))
		_, err := fsys.Stat(dir + "/tree")
		assert.ErrorIs(t, err, fs.ErrNotExist)
		assert.NoError(t, fsys.RemoveAll(dir+"/tree"), "RemoveAll of a missing path")
	})

	t.Run("ConcurrentFiles", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := fmt.Sprintf("%s/c%d", dir, i)
				w, err := fsys.Create(p)
				if err != nil {
					errs[i] = err
					return
				}
				if _, err := io.Copy(w, strings.NewReader(strings.Repeat(fmt.Sprint(i), 100000))); err != nil {
					errs[i] = err
				}
				if err := w.Close(); err != nil && errs[i] == nil {
					errs[i] = err
				}
			}()
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "file %d", i)
			assert.Equal(t, strings.Repeat(fmt.Sprint(i), 100000), readAll(t, fsys, fmt.Sprintf("%s/c%d", dir, i)))
		}
	})
}

// extractor is what push asks of a transport's FS to send many files as
// one stream.
type extractor interface {
	ExtractTar(ctx context.Context, dir string, r io.Reader) error
}

func testExtractTar(t *testing.T, tr cluster.Transport) {
	fsys, dir := scratch(t, tr)
	x, ok := fsys.(extractor)
	require.True(t, ok, "%T has no ExtractTar", fsys)
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()

	t.Run("ModesAndMtimes", func(t *testing.T) {
		mtime := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		entries := []struct {
			name, body string
			mode       int64
		}{
			{"d/", "", 0o700},
			{"d/run.sh", "#!/bin/sh\n", 0o777}, // a umask would take bits off
			{"d/ro.txt", "read only", 0o444},
			{"top", strings.Repeat("x", 100_000), 0o666},
		}
		for _, e := range entries {
			h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
			if strings.HasSuffix(e.name, "/") {
				h.Typeflag, h.Size = tar.TypeDir, 0
			}
			require.NoError(t, tw.WriteHeader(h))
			_, err := io.WriteString(tw, e.body)
			require.NoError(t, err)
		}
		require.NoError(t, tw.Close())
		require.NoError(t, fsys.MkdirAll(dir+"/x", 0o755))
		require.NoError(t, x.ExtractTar(ctx, dir+"/x", &b))
		for _, e := range entries {
			info, err := fsys.Lstat(dir + "/x/" + strings.TrimSuffix(e.name, "/"))
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(e.mode), info.Mode().Perm(), e.name)
			if !info.IsDir() {
				assert.Equal(t, e.body, readAll(t, fsys, dir+"/x/"+e.name))
				assert.Equal(t, mtime.Unix(), info.ModTime().Unix(), e.name)
			}
		}
		require.NoError(t, fsys.Chmod(dir+"/x/d", 0o755)) // so the scratch dir can go
	})

	t.Run("NotATarIsAnExitError", func(t *testing.T) {
		err := x.ExtractTar(ctx, dir, strings.NewReader(strings.Repeat("not a tar archive ", 100)))
		require.Error(t, err)
		var ee *cluster.ExitError
		require.ErrorAs(t, err, &ee, "a tar that refuses the stream must read as a command that failed: %v", err)
		assert.NotZero(t, ee.Code)
		assert.Contains(t, err.Error(), "tar:", "what tar said")
	})

	t.Run("Cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		pr, pw := io.Pipe()
		defer pw.Close()
		done := make(chan error, 1)
		go func() { done <- x.ExtractTar(ctx, dir, pr) }()
		_, err := pw.Write(make([]byte, 512)) // tar is reading
		require.NoError(t, err)
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(liveness):
			t.Fatal("ExtractTar did not return after its context was cancelled")
		}
	})
}

// testShell: a Shell line is shell code, run as typed (pipes, lists,
// expansions), behind the same Dir and Env as Args; its status is the
// line's.
func testShell(t *testing.T, tr cluster.Transport) {
	fsys, dir := scratch(t, tr)
	w, err := fsys.Create(dir + "/data")
	require.NoError(t, err)
	_, err = io.WriteString(w, "b\na\nb\n")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	r := runCmd(t, tr, cluster.Cmd{
		Shell: `sort data | uniq -c | sed 's/^ *//'; printf '%s|%s\n' "$V" "$(basename "$PWD")"; exit 3`,
		Dir:   dir,
		Env:   map[string]string{"V": "it's $HOME"},
	})
	var ee *cluster.ExitError
	require.ErrorAs(t, r.err, &ee, "stderr: %s", r.stderr)
	assert.Equal(t, 3, ee.Code)
	assert.Equal(t, "1 a\n2 b\nit's $HOME|"+path.Base(dir)+"\n", r.stdout)

	// A missing Dir runs nothing of the line (the local transport fails
	// to start, SSH fails in cd).
	var out SyncBuffer
	p, err := tr.Start(context.Background(), cluster.Cmd{Shell: "echo ran; echo ran again", Dir: dir + "/missing", Stdout: &out})
	if err == nil {
		err = p.Wait()
	}
	assert.Error(t, err)
	assert.Empty(t, out.String())

	// Args and Shell together are refused.
	_, err = tr.Start(context.Background(), cluster.Cmd{Args: []string{"true"}, Shell: "true"})
	assert.Error(t, err)
}

// gone reports, by asking the host, whether pid has exited (or is a zombie
// waiting for its parent, which is as good as gone).
func gone(t *testing.T, tr cluster.Transport, pid string) bool {
	t.Helper()
	r := runCmd(t, tr, cluster.Cmd{Args: sh(`grep -q '^State:[[:space:]]*Z' /proc/$1/status 2>/dev/null || ! test -e /proc/$1`, pid)})
	return r.err == nil
}

// testSignal: Process.Signal reaches the command's whole process group,
// including what it started in the background, so a caller that gives up
// on a command can leave nothing running; a group that ignores SIGTERM
// still goes with SIGKILL.
func testSignal(t *testing.T, tr cluster.Transport) {
	for _, tc := range []struct {
		name  string
		cmd   cluster.Cmd
		first syscall.Signal
		dies  string // the signal that ends the group
	}{
		{"TERM, shell line", cluster.Cmd{Shell: `sleep 300 & echo $!; sleep 301; echo survived`}, syscall.SIGTERM, "TERM"},
		// Not SIGINT: a shell without job control starts background
		// commands with SIGINT ignored.
		{"TERM, args", cluster.Cmd{Args: sh(`sleep 300 & echo $!; exec sleep 301`)}, syscall.SIGTERM, "TERM"},
		{"TERM ignored, then KILL", cluster.Cmd{Shell: `trap '' TERM; sleep 300 & echo $!; sleep 301`}, syscall.SIGTERM, "KILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), liveness)
			defer cancel()
			var out SyncBuffer
			tc.cmd.Stdout = &out
			p, err := tr.Start(ctx, tc.cmd)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return strings.HasSuffix(out.String(), "\n") }, liveness, 10*time.Millisecond)
			child := strings.TrimSpace(out.String())
			require.False(t, gone(t, tr, child), "background child %s not running", child)

			done := make(chan error, 1)
			go func() { done <- p.Wait() }()
			require.NoError(t, p.Signal(tc.first))
			if tc.dies == "KILL" {
				select {
				case err := <-done:
					t.Fatalf("a group ignoring SIG%s exited: %v", tc.dies, err)
				case <-time.After(300 * time.Millisecond):
				}
				assert.False(t, gone(t, tr, child), "background child ignoring SIGTERM")
				require.NoError(t, p.Signal(syscall.SIGKILL))
			}
			var err2 error
			select {
			case err2 = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("command still running 10s after its signal")
			}
			var ee *cluster.ExitError
			require.ErrorAs(t, err2, &ee)
			assert.Equal(t, tc.dies, ee.Signal)
			assert.NotContains(t, out.String(), "survived")
			assert.Eventually(t, func() bool { return gone(t, tr, child) }, 10*time.Second, 50*time.Millisecond,
				"background child %s outlived its group's signal", child)

			// Signalling a command that exited does nothing.
			assert.NoError(t, p.Signal(syscall.SIGTERM))
		})
	}
}
