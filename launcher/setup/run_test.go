package setup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
)

// localHosts are n hosts on this machine (the local transport), each with
// a workdir of its own holding lock.txt.
func localHosts(t *testing.T, n int) []Host {
	t.Helper()
	var hosts []Host
	for i := range n {
		name := []string{"h0", "h1", "h2"}[i]
		tr, err := cluster.NewLocal(cluster.Endpoint{Name: name})
		require.NoError(t, err)
		fsys, err := tr.FS(context.Background())
		require.NoError(t, err)
		wd := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(wd, "lock.txt"), []byte("a==1\n"), 0o644))
		hosts = append(hosts, Host{Name: name, T: tr, FS: fsys, Workdir: wd, Env: map[string]string{"WHO": name}})
	}
	return hosts
}

func ran(res []Result) []string {
	var out []string
	for _, r := range res {
		if r.Run {
			out = append(out, r.Host)
		}
	}
	return out
}

// TestRunOnceUntilKeyChanges: setup runs in each workdir with the host's
// env, its output prefixed and logged; a second Run skips; a changed key
// file runs again on that host only.
func TestRunOnceUntilKeyChanges(t *testing.T) {
	hosts := localHosts(t, 2)
	var out bytes.Buffer
	logDir := t.TempDir()
	opts := Options{Lines: []string{"echo hello $WHO", "touch made"}, Keys: []string{"lock.txt"}, Out: &out, LogDir: logDir}
	res, err := Run(context.Background(), hosts, opts)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"h0", "h1"}, ran(res))
	assert.Contains(t, out.String(), "[setup@h0] hello h0\n")
	assert.Contains(t, out.String(), "[setup@h1] hello h1\n")
	assert.FileExists(t, filepath.Join(hosts[0].Workdir, "made"))
	assert.FileExists(t, filepath.Join(hosts[0].Workdir, StampFile))
	log, err := os.ReadFile(filepath.Join(logDir, "setup-h1.log"))
	require.NoError(t, err)
	assert.Equal(t, "hello h1\n", string(log))

	out.Reset()
	res, err = Run(context.Background(), hosts, opts)
	require.NoError(t, err)
	assert.Empty(t, ran(res))
	assert.Empty(t, out.String())

	require.NoError(t, os.WriteFile(filepath.Join(hosts[1].Workdir, "lock.txt"), []byte("a==2\n"), 0o644))
	res, err = Run(context.Background(), hosts, opts)
	require.NoError(t, err)
	assert.Equal(t, []string{"h1"}, ran(res))
	assert.Equal(t, "lock.txt changed", res[1].Why)
}

// TestRunFailureNamesHostStatusAndTail: a failing line ends the host's
// setup (set -e) with its status; the error names host, status and the
// last lines, and no stamp is left, so the next Run tries again.
func TestRunFailureNamesHostStatusAndTail(t *testing.T) {
	hosts := localHosts(t, 2)
	opts := Options{Lines: []string{`echo step one`, `if [ "$WHO" = h1 ]; then echo "no such package" >&2; exit 3; fi`, `echo never on h1`}}
	res, err := Run(context.Background(), hosts, opts)
	var se *Error
	require.True(t, errors.As(err, &se), "%v", err)
	assert.Equal(t, "h1", se.Host)
	assert.Equal(t, 3, se.Code)
	assert.Equal(t, []string{"step one", "no such package"}, se.Tail)
	assert.Contains(t, err.Error(), "setup on h1 exited 3; its last lines:\n  step one\n  no such package\n")
	assert.NoError(t, res[0].Err)
	assert.NoFileExists(t, filepath.Join(hosts[1].Workdir, StampFile))
	res, _ = Run(context.Background(), hosts, opts)
	assert.Equal(t, []string{"h1"}, ran(res), "h0 is current, h1 tries again")
}

// TestRunTimeoutStops: a setup past its timeout is stopped and fails.
func TestRunTimeoutStops(t *testing.T) {
	hosts := localHosts(t, 1)
	start := time.Now()
	_, err := Run(context.Background(), hosts, Options{Lines: []string{"echo waiting", "sleep 30"}, Timeout: 300 * time.Millisecond})
	var se *Error
	require.True(t, errors.As(err, &se), "%v", err)
	assert.ErrorIs(t, err, errTimeout)
	assert.Equal(t, -1, se.Code)
	assert.Less(t, time.Since(start), 10*time.Second, "stopped with SIGTERM, not waited out")
	assert.True(t, strings.Contains(err.Error(), "setup_timeout passed"), "%v", err)
}

// TestRunMissingWorkdir: a host without its workdir fails before anything
// runs, saying to push first.
func TestRunMissingWorkdir(t *testing.T) {
	hosts := localHosts(t, 1)
	hosts[0].Workdir = filepath.Join(hosts[0].Workdir, "nothing-here")
	_, err := Run(context.Background(), hosts, Options{Lines: []string{"true"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "drover push JOB.toml")
}

// A host is untrusted: a setup_key file it serves without end (here
// /dev/zero under the key's name) is refused at the bound instead of
// hashed for ever, and the file's own bytes are hashed otherwise.
func TestDigestBounded(t *testing.T) {
	h := localHosts(t, 1)[0]
	d, err := digest(h.FS, filepath.Join(h.Workdir, "lock.txt"), 5)
	require.NoError(t, err, "5 bytes fit a limit of 5")
	assert.Len(t, d, 64)
	_, err = digest(h.FS, filepath.Join(h.Workdir, "lock.txt"), 4)
	assert.ErrorContains(t, err, "longer than 4 bytes")
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(h.Workdir, "endless.lock")))
	_, err = digest(h.FS, filepath.Join(h.Workdir, "endless.lock"), 1<<20)
	assert.ErrorContains(t, err, "longer than 1048576 bytes")
	d, err = digest(h.FS, filepath.Join(h.Workdir, "gone.lock"), 5)
	require.NoError(t, err)
	assert.Equal(t, Absent, d)
}

// A host whose `uname -m` prints without end is stopped at the bound and
// named, instead of filling the controller's memory.
func TestArchAnswerBounded(t *testing.T) {
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "uname"), []byte("#!/bin/sh\nexec yes x86_64\n"), 0o755))
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	h := localHosts(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := current(ctx, h, Options{Lines: []string{"true"}})
	var tm *cluster.TooMuchOutputError
	require.ErrorAs(t, err, &tm)
	assert.Equal(t, "h0", tm.Host)
	assert.NoError(t, ctx.Err(), "stopped at the bound, not at the test's deadline")
}
