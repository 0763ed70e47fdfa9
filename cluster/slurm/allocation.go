package slurm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/droverhq/drover/cluster/config"
)

// Allocation is the Slurm allocation drover runs in, as its environment
// describes it.
type Allocation struct {
	JobID string
	// Nodes in SLURM_JOB_NODELIST order: the order of ranks.
	Nodes []string
	// GPUsPerNode is how many GPUs the allocation has on each node (0: none).
	GPUsPerNode int
	// RestartCount is SLURM_RESTART_COUNT: how often Slurm requeued the job.
	RestartCount int
}

// AllocationError says what in the environment of an allocation drover
// could not use.
type AllocationError struct {
	Var, Value, Msg string
}

func (e *AllocationError) Error() string {
	return fmt.Sprintf("Slurm allocation: %s=%q: %s", e.Var, e.Value, e.Msg)
}

// FromEnv reads the allocation from the variables Slurm sets in a batch
// script or salloc shell; getenv is os.Getenv in drover, a map in tests. ok
// is false outside an allocation (no SLURM_JOB_ID).
func FromEnv(getenv func(string) string) (a *Allocation, ok bool, err error) {
	a = &Allocation{JobID: getenv("SLURM_JOB_ID")}
	if a.JobID == "" {
		return nil, false, nil
	}
	list := getenv("SLURM_JOB_NODELIST")
	if list == "" {
		list = getenv("SLURM_NODELIST")
	}
	if a.Nodes, err = ExpandNodelist(list); err != nil {
		return nil, true, err
	}
	if len(a.Nodes) == 0 {
		return nil, true, &AllocationError{Var: "SLURM_JOB_NODELIST", Value: list, Msg: "names no nodes"}
	}
	if a.GPUsPerNode, err = gpusPerNode(getenv); err != nil {
		return nil, true, err
	}
	if v := getenv("SLURM_RESTART_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, true, &AllocationError{Var: "SLURM_RESTART_COUNT", Value: v, Msg: "not a count"}
		}
		a.RestartCount = n
	}
	return a, true, nil
}

// gpusPerNode takes the per-node GPU count from the variables Slurm sets
// for --gpus-per-node ("2" or "a100:2"), else for the batch node
// (SLURM_GPUS_ON_NODE, or the index list SLURM_JOB_GPUS). drover asks for
// the same count on every node, so the batch node's count is every node's.
func gpusPerNode(getenv func(string) string) (int, error) {
	if v := getenv("SLURM_GPUS_PER_NODE"); v != "" {
		_, count, _ := cut(v)
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 {
			return 0, &AllocationError{Var: "SLURM_GPUS_PER_NODE", Value: v, Msg: `want a count such as "2" or "a100:2"`}
		}
		return n, nil
	}
	if v := getenv("SLURM_GPUS_ON_NODE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, &AllocationError{Var: "SLURM_GPUS_ON_NODE", Value: v, Msg: "not a count"}
		}
		return n, nil
	}
	if v := getenv("SLURM_JOB_GPUS"); v != "" {
		return len(strings.Split(v, ",")), nil
	}
	return 0, nil
}

// cut splits "type:count" at its last colon; a bare count has no type.
func cut(v string) (typ, count string, typed bool) {
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return "", v, false
	}
	return v[:i], v[i+1:], true
}

// Hosts are the allocation's nodes as drover hosts: named and addressed by
// node name, reached with the slurm transport, each with the allocation's
// GPUs. Inside a step Slurm numbers a node's allocated GPUs from 0 (with
// ConstrainDevices, the usual GPU cluster setup), so a node with G GPUs
// has GPUs 0..G-1, and G of them are required.
func (a *Allocation) Hosts() []config.Host {
	hosts := make([]config.Host, len(a.Nodes))
	for i, n := range a.Nodes {
		h := config.Host{Name: n, Address: n, Transport: config.TransportSlurm, GPUs: config.GPUSpec{List: []int{}}}
		for g := range a.GPUsPerNode {
			h.GPUs.List = append(h.GPUs.List, g)
		}
		h.MinGPUs = a.GPUsPerNode
		hosts[i] = h
	}
	return hosts
}
