package hostio

import (
	"github.com/droverhq/drover/cluster/config"
	"github.com/droverhq/drover/gpu"
)

// GPUPolicy is what gpu.Select needs of the job file for host h: its gpus
// key, the host's min_gpus (else the job's) and gpu_max_used_mib. The
// conversion lives here, at the boundary, so package gpu does not read
// the job file.
func GPUPolicy(h config.Host, job config.Job) gpu.Policy {
	minGPUs := h.MinGPUs
	if minGPUs == 0 {
		minGPUs = job.MinGPUs
	}
	return gpu.Policy{
		GPUs:       gpu.Spec{Auto: h.GPUs.Auto, List: h.GPUs.List},
		MinGPUs:    minGPUs,
		MaxUsedMiB: job.GPUMaxUsedMiB,
	}
}
