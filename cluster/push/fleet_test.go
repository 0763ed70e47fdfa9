package push

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/internal/fleettest"
)

var fleet *fleettest.Fleet

func TestMain(m *testing.M) {
	os.Exit(fleettest.Main(m, fleettest.Options{Name: "pu", N: 3, Subnet: 12}, &fleet))
}

// dial connects to fleet host i with fast keepalives (so a cut link is
// noticed in about a second) and closes the transport at the end of t.
func dial(t *testing.T, i int) cluster.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := cluster.Dial(ctx, fleet.Endpoints()[i], cluster.DialOptions{
		SSHConfigPath:     "none",
		AgentSocket:       "none",
		KeepAliveInterval: 300 * time.Millisecond,
		KeepAliveCountMax: 3,
	})
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	return tr
}

func sftpFS(t *testing.T, tr cluster.Transport) cluster.FS {
	t.Helper()
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	return fsys
}

// TestCoreSFTP runs the core scenarios over real SFTP to the fleet.
func TestCoreSFTP(t *testing.T) {
	fleettest.Need(t, fleet)
	fss := make([]cluster.FS, len(fleet.Hosts))
	for i := range fleet.Hosts {
		fss[i] = sftpFS(t, dial(t, i))
	}
	for n, tc := range coreTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys := fss[n%len(fss)]
			dir := fmt.Sprintf("core/%s/work", tc.name)
			tc.fn(&env{t: t, local: t.TempDir(), fs: fsys, dir: dir})
		})
	}
}

// TestSFTPHomeAndAbsolutePaths pushes to a relative workdir (under the
// login user's home) and checks the files landed there, as seen by a shell
// on the host.
func TestSFTPHomeAndAbsolutePaths(t *testing.T) {
	fleettest.Need(t, fleet)
	tr := dial(t, 2)
	fsys := sftpFS(t, tr)
	local := t.TempDir()
	writeFiles(t, local, map[string]string{"train.py": "print(1)\n"})
	require.NoError(t, os.Chmod(filepath.Join(local, "train.py"), 0o751))
	tree, err := ScanLocal(local, Options{})
	require.NoError(t, err)
	_, err = Sync(context.Background(), fsys, "pu-h2", tree, "~/homejob", Options{})
	require.NoError(t, err)
	out, err := fleet.Exec(2, "stat", "-c", "%a %Y %U %s", "/home/"+fleettest.User+"/homejob/train.py")
	require.NoError(t, err)
	mt, _ := os.Stat(filepath.Join(local, "train.py"))
	assert.Equal(t, fmt.Sprintf("751 %d %s 9", mt.ModTime().Unix(), fleettest.User), strings.TrimSpace(string(out)))
}

// TestSFTPParallelHosts syncs one scanned tree to every host at once, as
// the CLI does.
func TestSFTPParallelHosts(t *testing.T) {
	fleettest.Need(t, fleet)
	local := t.TempDir()
	files := map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("pkg%d/mod%03d.py", i%7, i)] = strings.Repeat("x", i*97)
	}
	writeFiles(t, local, files)
	tree, err := ScanLocal(local, Options{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	results := make([]Result, len(fleet.Hosts))
	errs := make([]error, len(fleet.Hosts))
	fss := make([]cluster.FS, len(fleet.Hosts))
	for i := range fleet.Hosts {
		fss[i] = sftpFS(t, dial(t, i))
	}
	for i := range fleet.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Sync(context.Background(), fss[i], fleet.Hosts[i].Name, tree, "parallel/work", Options{})
		}()
	}
	wg.Wait()
	want := localSnapshot(t, local)
	for i := range fleet.Hosts {
		require.NoError(t, errs[i])
		assert.Equal(t, len(files), results[i].FilesSent)
		assert.Equal(t, tree.Bytes, results[i].BytesSent)
		assert.Equal(t, want, snapshot(t, fss[i], "parallel/work", true), "host %d", i)
	}
}

// interruptScenario pushes v1, then starts pushing v2 (a large file and
// many small ones) and calls kill once some bytes of v2 are on the wire.
// It then checks over a fresh connection that the host still holds v1
// exactly, and that the next push completes.
func interruptScenario(t *testing.T, host int, kill func(tr cluster.Transport), afterKill func()) {
	tr := dial(t, host)
	fsys := sftpFS(t, tr)
	local := t.TempDir()
	v1files := map[string]string{"train.py": "v1", "big.bin": "small at first"}
	for i := range 50 {
		v1files[fmt.Sprintf("lib/m%02d.py", i)] = fmt.Sprintf("v1 %d", i)
	}
	writeFiles(t, local, v1files)
	const dir = "interrupt/work"
	_, err := Sync(context.Background(), fsys, "h", mustScan(t, local), dir, Options{})
	require.NoError(t, err)
	old := snapshot(t, fsys, dir, false) // including .drover: manifest untouched too
	delete(old, tmpDir)

	v2files := map[string]string{"train.py": "v2", "big.bin": strings.Repeat("0123456789abcdef", 1<<20)} // 16 MiB
	for i := range 50 {
		v2files[fmt.Sprintf("lib/m%02d.py", i)] = fmt.Sprintf("v2 %d", i)
	}
	writeFiles(t, local, v2files)
	tree := mustScan(t, local)

	var once sync.Once
	var killedAt atomic.Int64
	opts := Options{Progress: func(p Progress) {
		if p.BytesDone > 1<<20 {
			once.Do(func() {
				killedAt.Store(p.BytesDone)
				go kill(tr)
			})
		}
	}}
	done := make(chan error, 1)
	go func() {
		_, err := Sync(context.Background(), fsys, "h", tree, dir, opts)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("push did not notice the lost connection within 60s")
	}
	require.Error(t, err, "push survived the kill")
	require.NotZero(t, killedAt.Load(), "the kill never happened")
	t.Logf("killed after %d bytes: %v", killedAt.Load(), err)
	if afterKill != nil {
		afterKill()
	}

	fresh := sftpFS(t, dial(t, host))
	got := snapshot(t, fresh, dir, false)
	delete(got, tmpDir)
	for p := range got {
		if strings.HasPrefix(p, tmpDir+"/") {
			delete(got, p)
		}
	}
	assert.Equal(t, old, got, "tree on the host after an interrupted push")

	res, err := Sync(context.Background(), fresh, "h", tree, dir, Options{})
	require.NoError(t, err)
	assert.Equal(t, len(v2files), res.FilesSent)
	assert.Equal(t, localSnapshot(t, local), snapshot(t, fresh, dir, true))
	_, err = fresh.Lstat(path.Join(dir, tmpDir))
	assert.True(t, errors.Is(err, fs.ErrNotExist), "temp dir after the repair push: %v", err)
}

func mustScan(t *testing.T, dir string) *Tree {
	t.Helper()
	tree, err := ScanLocal(dir, Options{})
	require.NoError(t, err)
	return tree
}

// TestSFTPConnectionClosedMidTransfer closes the SSH connection while the
// upload is in flight.
func TestSFTPConnectionClosedMidTransfer(t *testing.T) {
	fleettest.Need(t, fleet)
	interruptScenario(t, 0, func(tr cluster.Transport) { tr.Close() }, nil)
}

// TestSFTPLinkCutMidTransfer pulls the host's cable while the upload is in
// flight: push must fail once keepalives go unanswered, and the host,
// reconnected, still holds the old tree.
func TestSFTPLinkCutMidTransfer(t *testing.T) {
	fleettest.Need(t, fleet)
	healed := false
	t.Cleanup(func() {
		if !healed {
			fleet.Heal(1)
		}
	})
	interruptScenario(t, 1,
		func(cluster.Transport) { require.NoError(t, fleet.Cut(1)) },
		func() { require.NoError(t, fleet.Heal(1)); healed = true })
}

// TestSafetySFTP runs the safety scenarios over real SFTP to the fleet.
func TestSafetySFTP(t *testing.T) {
	fleettest.Need(t, fleet)
	fss := make([]cluster.FS, len(fleet.Hosts))
	for i := range fleet.Hosts {
		fss[i] = sftpFS(t, dial(t, i))
	}
	for n, tc := range safetyTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(&env{t: t, local: t.TempDir(), fs: fss[n%len(fss)], dir: fmt.Sprintf("safety/%s/work", tc.name)})
		})
	}
}

// fullDisk mounts a tmpfs of size bytes at ~/rel on host i, in the mount
// namespace of its sshd (where sftp-server and tar run), writable by the
// login user, and unmounts it at the end of t.
func fullDisk(t *testing.T, i int, rel string, size int) {
	t.Helper()
	pid, err := os.ReadFile(filepath.Join(fleet.Dir, "hosts", fleet.Hosts[i].Name, "sshd.pid"))
	require.NoError(t, err)
	dir := path.Join("/home", fleettest.User, rel)
	ns := []string{"-t", strings.TrimSpace(string(pid)), "-m", "--"}
	out, err := exec.Command("nsenter", append(ns, "sh", "-c", `mkdir -p "$1" && mount -t tmpfs -o size="$2",mode=0777 drover-full "$1"`,
		"sh", dir, fmt.Sprint(size))...).CombinedOutput()
	require.NoError(t, err, "mount a small filesystem on %s: %s", fleet.Hosts[i].Name, out)
	t.Cleanup(func() {
		out, err := exec.Command("nsenter", append(ns, "sh", "-c", `umount "$1" && rmdir "$1"`, "sh", dir)...).CombinedOutput()
		assert.NoError(t, err, "unmount: %s", out)
	})
}

// TestNoSpaceLeft is issue 21's eleventh item: a full disk on a host was
// reported as sftp's bare "Failure" (SSH_FX_FAILURE), and a tar stream
// that failed for it was sent again over SFTP. Both ways the error now
// says what happened, with the space left, and nothing is sent twice.
func TestNoSpaceLeft(t *testing.T) {
	fleettest.Need(t, fleet)
	fullDisk(t, 2, "nospace", 256<<10)
	fsys := sftpFS(t, dial(t, 2))
	for _, tc := range []struct {
		name  string
		files int
	}{{"sftp", 2}, {"stream", 2 * streamMin}} {
		t.Run(tc.name, func(t *testing.T) {
			local := t.TempDir()
			files := map[string]string{}
			for i := range tc.files {
				files[fmt.Sprintf("f%02d.bin", i)] = strings.Repeat("x", (1<<20)/tc.files)
			}
			writeFiles(t, local, files)
			res, err := Sync(context.Background(), fsys, "pu-h2", mustScan(t, local), "nospace/"+tc.name, Options{})
			var ns *NoSpaceError
			require.True(t, errors.As(err, &ns), "%v", err)
			assert.Less(t, ns.Free, int64(256<<10))
			assert.Equal(t, int64(1<<20), ns.Need)
			assert.Contains(t, err.Error(), "no space left on pu-h2 (free: ")
			assert.NotContains(t, err.Error(), "push to", "named once")
			assert.Empty(t, res.Warnings, "no fallback from the stream to SFTP")
			t.Log(err)
		})
	}
}
