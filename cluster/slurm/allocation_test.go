package slurm

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/droverhq/drover/cluster/config"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want *Allocation
	}{
		{"outside", map[string]string{"SLURM_JOB_NODELIST": "n1"}, nil},
		{"cpu", map[string]string{"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]"},
			&Allocation{JobID: "9", Nodes: []string{"n1", "n2"}}},
		{"old name", map[string]string{"SLURM_JOB_ID": "9", "SLURM_NODELIST": "n3"},
			&Allocation{JobID: "9", Nodes: []string{"n3"}}},
		{"gpus per node typed", map[string]string{"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "g1", "SLURM_GPUS_PER_NODE": "a100:4", "SLURM_GPUS_ON_NODE": "2"},
			&Allocation{JobID: "9", Nodes: []string{"g1"}, GPUsPerNode: 4}},
		{"gpus on node", map[string]string{"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "g1", "SLURM_GPUS_ON_NODE": "2"},
			&Allocation{JobID: "9", Nodes: []string{"g1"}, GPUsPerNode: 2}},
		{"job gpus", map[string]string{"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "g1", "SLURM_JOB_GPUS": "4,5,6"},
			&Allocation{JobID: "9", Nodes: []string{"g1"}, GPUsPerNode: 3}},
		{"requeued", map[string]string{"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "g1", "SLURM_RESTART_COUNT": "2"},
			&Allocation{JobID: "9", Nodes: []string{"g1"}, RestartCount: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, ok, err := FromEnv(func(k string) string { return tc.env[k] })
			require.NoError(t, err)
			assert.Equal(t, tc.want != nil, ok)
			assert.Equal(t, tc.want, a)
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name, key, value string
	}{
		{"no nodes", "SLURM_JOB_NODELIST", ""},
		{"gpus", "SLURM_GPUS_PER_NODE", "a100:many"},
		{"gpus on node", "SLURM_GPUS_ON_NODE", "-1"},
		{"restarts", "SLURM_RESTART_COUNT", "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n1", tc.key: tc.value}
			_, ok, err := FromEnv(func(k string) string { return env[k] })
			assert.True(t, ok)
			var ae *AllocationError
			require.True(t, errors.As(err, &ae), "%v", err)
			assert.Equal(t, tc.key, ae.Var)
		})
	}
}

func TestAllocationHosts(t *testing.T) {
	a := &Allocation{JobID: "9", Nodes: []string{"g1", "c1"}, GPUsPerNode: 2}
	assert.Equal(t, []config.Host{
		{Name: "g1", Address: "g1", Transport: config.TransportSlurm, GPUs: config.GPUSpec{List: []int{0, 1}}, MinGPUs: 2},
		{Name: "c1", Address: "c1", Transport: config.TransportSlurm, GPUs: config.GPUSpec{List: []int{0, 1}}, MinGPUs: 2},
	}, a.Hosts())
	a.GPUsPerNode = 0
	assert.Equal(t, config.GPUSpec{List: []int{}}, a.Hosts()[0].GPUs)
}
