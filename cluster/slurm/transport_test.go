package slurm

import (
	"os"
	"testing"

	"github.com/droverhq/drover/cluster"
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/cluster/slurmtest"
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
