package slurm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/slurmtest"
	"github.com/droverhq/drover/cluster/testfleet"
	"github.com/droverhq/drover/cluster/transporttest"
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
	tr, err := New(h, Options{JobID: job, Helper: []string{"/usr/bin/env", helperEnv + "=1", bin}})
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

// TestDialNeedsSharedHome: a node that does not see this machine's home
// (here the fleet user's home, private to each node's namespace) is refused
// at dial with a SharedFSError, not at the first push or checkpoint.
func TestDialNeedsSharedHome(t *testing.T) {
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
	tr, err := Dial(context.Background(), h, opts)
	require.NoError(t, err, "the test's own home is shared with every node")
	require.NoError(t, tr.Close())

	// /home/drovertest is each node's own (testfleet binds a private
	// directory over it in the node's namespace): made here, it is not
	// there.
	private, err := os.MkdirTemp("/home/"+testfleet.User, "not-shared-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(private) })
	opts.Home = private
	_, err = Dial(context.Background(), h, opts)
	var se *SharedFSError
	require.ErrorAs(t, err, &se)
	t.Log(err)
	assert.Equal(t, sl.Nodes[2], se.Node)
	entries, _ := os.ReadDir(filepath.Join(private, ".drover"))
	assert.Empty(t, entries, "the check leaves no file behind")
}
