package slurm

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/transporttest"
	"github.com/droverhq/drover/internal/fleettest"
	"github.com/droverhq/drover/internal/fleettest/slurmtest"
)

// helperEnv makes this test binary the step helper: srun runs it on the
// node as drover runs `drover slurm-step`.
const helperEnv = "DROVER_SLURM_TEST_STEP_HELPER"

var sl *slurmtest.Cluster

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Unsetenv(helperEnv)
		os.Exit(StepMain(os.Args[1:], os.Stderr))
	}
	os.Exit(slurmtest.Main(m, slurmtest.Options{Name: "sl", N: 3, Subnet: 25}, &sl))
}

// dial returns a slurm transport to node i of a fresh allocation.
func dial(t *testing.T, job string, i int) cluster.Transport {
	t.Helper()
	for _, kv := range sl.Env() {
		k, v, _ := cutEnv(kv)
		t.Setenv(k, v)
	}
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := config.Host{Name: sl.Nodes[i], Address: sl.Nodes[i], Transport: config.TransportSlurm}
	tr, err := New(h.Endpoint(), Options{JobID: job, Helper: []string{"/usr/bin/env", helperEnv + "=1", bin}})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func cutEnv(kv string) (string, string, bool) {
	for i := range kv {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

// TestConformance runs the transport suite against steps of a real
// allocation, on its second node.
func TestConformance(t *testing.T) {
	slurmtest.Need(t, sl)
	job := sl.Allocate(t, 3)
	transporttest.Run(t, func(t *testing.T) cluster.Transport { return dial(t, job, 1) })
}

// sharer is what the launcher asks a slurm transport.
type sharer interface{ SharesFS() bool }

// privateHome makes a directory on node i that this machine does not see:
// /home/drovertest is each node's own (testfleet binds a private directory
// over it in the node's namespace). The directory of the same name here is
// removed at the end, as is the node's.
func privateHome(t *testing.T, job string, i int) string {
	t.Helper()
	dir := filepath.Join("/home", fleettest.User, fmt.Sprintf("not-shared-%d-%d", os.Getpid(), time.Now().UnixNano()))
	tr := dial(t, job, i)
	run := func(args ...string) {
		p, err := tr.Start(context.Background(), cluster.Cmd{Args: args, Dir: "/"})
		require.NoError(t, err)
		require.NoError(t, p.Wait(), "%v on %s", args, sl.Nodes[i])
	}
	run("mkdir", "-p", dir)
	t.Cleanup(func() {
		run("rm", "-rf", dir)
		os.RemoveAll(dir)
	})
	return dir
}

// dialPrivate dials node i through Dial with its home and workdir on
// privateHome.
func dialPrivate(t *testing.T, job string, i int) cluster.Transport {
	t.Helper()
	home := privateHome(t, job, i)
	t.Setenv("HOME", home) // srun passes it on, as it does the real one
	bin, err := os.Executable()
	require.NoError(t, err)
	h := config.Host{Name: sl.Nodes[i], Address: sl.Nodes[i], Transport: config.TransportSlurm, Workdir: "work"}
	tr, err := Dial(context.Background(), h.Endpoint(), Options{JobID: job, Home: home, Helper: []string{"/usr/bin/env", helperEnv + "=1", bin}})
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestConformanceNotShared runs the transport suite on a node that does
// not see this machine's home: its FS is the node's own, over SFTP through
// a step, and the suite checks that a command on the node sees what the
// FS wrote there.
func TestConformanceNotShared(t *testing.T) {
	slurmtest.Need(t, sl)
	job := sl.Allocate(t, 3)
	transporttest.Run(t, func(t *testing.T) cluster.Transport {
		tr := dialPrivate(t, job, 1)
		require.False(t, tr.(sharer).SharesFS())
		return tr
	})
}

// TestDialSharedCheck: a node that sees this machine's home and workdir
// (the test's own home) shares its filesystem; one whose home is private
// to it does not, gets its files over a step, and the check leaves no
// marker behind on either side.
func TestDialSharedCheck(t *testing.T) {
	slurmtest.Need(t, sl)
	job := sl.Allocate(t, 3)
	bin, err := os.Executable()
	require.NoError(t, err)
	for _, kv := range sl.Env() {
		k, v, _ := cutEnv(kv)
		t.Setenv(k, v)
	}
	h := config.Host{Name: sl.Nodes[2], Address: sl.Nodes[2], Transport: config.TransportSlurm}
	opts := Options{JobID: job, Helper: []string{"/usr/bin/env", helperEnv + "=1", bin}}
	tr, err := Dial(context.Background(), h.Endpoint(), opts)
	require.NoError(t, err, "the test's own home is shared with every node")
	assert.True(t, tr.(sharer).SharesFS())
	require.NoError(t, tr.Close())

	// A home seen, a workdir not: not shared.
	h.Workdir = privateHome(t, job, 2)
	tr, err = Dial(context.Background(), h.Endpoint(), opts)
	require.NoError(t, err)
	assert.False(t, tr.(sharer).SharesFS(), "workdir %s is the node's own", h.Workdir)
	fsys, err := tr.FS(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, sftpServers(t, 2), "the node's files are served from a step on it")
	w, err := fsys.Create(h.Workdir + "/hello")
	require.NoError(t, err)
	_, err = io.WriteString(w, "from the controller")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	var out strings.Builder
	p, err := tr.Start(context.Background(), cluster.Cmd{Args: []string{"cat", h.Workdir + "/hello"}, Stdout: &out})
	require.NoError(t, err)
	require.NoError(t, p.Wait())
	assert.Equal(t, "from the controller", out.String(), "the node sees what its FS wrote")
	_, err = os.Stat(filepath.Join(h.Workdir, "hello"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "and this machine does not")
	entries, _ := os.ReadDir(filepath.Join(h.Workdir, ".drover"))
	assert.Empty(t, entries, "the check leaves no file behind")
	require.NoError(t, tr.Close())
	_, err = tr.FS(context.Background())
	assert.Error(t, err, "a closed transport gives no file access")
	assert.Empty(t, sftpServers(t, 2), "Close leaves no sftp-server on the node")
}

// sftpServers lists the sftp-server processes in node i's namespace.
func sftpServers(t *testing.T, i int) []int {
	t.Helper()
	pids, err := sl.Fleet.Pids(i)
	require.NoError(t, err)
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(b), "sftp-server") {
			out = append(out, pid)
		}
	}
	return out
}
