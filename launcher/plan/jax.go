package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/droverhq/drover/cluster/config"
)

// planJAX lays out a jax job: procs_per_host processes on every host (one
// by default, which then drives all of the host's GPUs), process ids
// contiguous per host, hosts in file order. A host's selected GPUs are
// dealt out in equal contiguous shares; every process on the host sees
// all of them (CUDA_VISIBLE_DEVICES) and JAX_LOCAL_DEVICE_IDS picks its
// share, which is how jax.distributed.initialize narrows a process's
// devices itself (the same scheme it uses under Slurm and Open MPI).
//
// jax.distributed.initialize() reads JAX_COORDINATOR_ADDRESS and
// JAX_LOCAL_DEVICE_IDS (jax/_src/distributed.py). It takes num_processes
// and process_id only as arguments or from a cluster it detects (Slurm,
// Open MPI, TPU, Kubernetes), none of which a static fleet is, so drover
// also sets JAX_NUM_PROCESSES and JAX_PROCESS_ID for the script to pass
// on (see examples/jax/train.py).
func planJAX(cfg *config.Config, slots []*hostSlots) ([]Process, error) {
	job := cfg.Job
	n := max(job.ProcsPerHost, 1)
	if err := checkJAXShares(cfg, slots, n); err != nil {
		return nil, err
	}
	coord := joinHostPort(slots[0].addr, masterPort(job))
	world := n * len(slots)
	var procs []Process
	for _, hs := range slots {
		share := len(hs.gpus) / n
		for l := 0; l < n; l++ {
			id := hs.index*n + l
			env := map[string]string{
				"JAX_COORDINATOR_ADDRESS": coord,
				"JAX_NUM_PROCESSES":       strconv.Itoa(world),
				"JAX_PROCESS_ID":          strconv.Itoa(id),
			}
			var gpus []int
			if share > 0 {
				gpus = append(gpus, hs.gpus[l*share:(l+1)*share]...)
				ids := make([]string, share)
				for k := range ids {
					ids[k] = strconv.Itoa(l*share + k)
				}
				env["JAX_LOCAL_DEVICE_IDS"] = strings.Join(ids, ",")
			}
			procs = append(procs, Process{
				Host: hs.host, Address: hs.addr, Role: RoleProcess, Index: id,
				Rank: -1, LocalRank: -1, NodeRank: -1, GPUs: gpus,
				Visible: append([]int(nil), hs.gpus...),
				Command: append([]string(nil), job.Command...), Env: env,
			})
		}
	}
	return procs, nil
}

// checkJAXShares refuses a host whose GPUs procs_per_host processes cannot
// share evenly: jax expects every process to drive the same number of
// devices.
func checkJAXShares(cfg *config.Config, slots []*hostSlots, n int) error {
	for _, hs := range slots {
		g := len(hs.gpus)
		if g == 0 || g%n == 0 {
			continue
		}
		return &config.ConfigError{File: cfg.Path, Key: "job.procs_per_host",
			Msg: fmt.Sprintf("%s has %d GPUs selected, which %d processes cannot share evenly", hs.host.Name, g, n),
			Fix: "set procs_per_host to a divisor of every host's GPU count (1: one process per host driving all its GPUs), or pin gpus = [...] on the host"}
	}
	return nil
}
