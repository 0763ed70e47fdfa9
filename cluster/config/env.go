package config

import (
	"strings"

	"github.com/droverhq/drover/cluster"
)

// ValidEnvName reports whether name is a portable environment variable
// name (a shell identifier). It is cluster.ValidEnvName: the one rule every
// layer uses (the job file's [job.env], the plan, the transports that
// export a command's environment).
func ValidEnvName(name string) bool { return cluster.ValidEnvName(name) }

// torchWorkerEnv is what torchrun's elastic agent gives every worker
// (torch/distributed/elastic/agent/server/local_elastic_agent.py,
// _start_workers, and the error file from elastic/multiprocessing).
var torchWorkerEnv = []string{"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK",
	"LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "ROLE_NAME", "ROLE_RANK",
	"ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
	"TORCHELASTIC_ERROR_FILE"}

// reservedEnv lists the variables drover sets itself for each framework
// (package plan sets them; its tests check this table against what it
// sets). [job.env] may not set them, because a silently ignored or silently
// winning override would break the rendezvous in ways that are hard to see.
// Every DROVER_* name is reserved too. The defaults in tunableEnv are not
// reserved: [job.env] replaces them.
var reservedEnv = map[Framework][]string{
	PyTorch:    append([]string{"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}, torchWorkerEnv...),
	Torchrun:   append([]string{"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}, torchWorkerEnv...),
	TensorFlow: {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_CONFIG"},
	JAX: {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "JAX_COORDINATOR_ADDRESS",
		"JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_LOCAL_DEVICE_IDS"},
}

// KnownFramework reports whether drover can lay out framework f.
func KnownFramework(f Framework) bool {
	_, ok := reservedEnv[f]
	return ok
}

// tunableEnv are the variables drover sets only as defaults, because users
// legitimately tune them: thread counts and the collective libraries' own
// settings. A value in [job.env] wins.
var tunableEnv = map[string]bool{
	"OMP_NUM_THREADS": true,
	// Set with hang_timeout, so that a hung rank can be asked for its stack.
	"PYTHONFAULTHANDLER": true,
	// A Python command's gets drover's stack hook first (drover stacks);
	// the value [job.env] or [host.env] gives follows it.
	"PYTHONPATH": true,
	// Set for every process, so that print() reaches the logs at once.
	"PYTHONUNBUFFERED":                true,
	"TORCH_NCCL_ASYNC_ERROR_HANDLING": true,
	"NCCL_ASYNC_ERROR_HANDLING":       true,
	// PyTorch's flight recorder, set for a PyTorch job that uses NCCL
	// (package plan, ncclEnv): a job may size or place it itself.
	"TORCH_NCCL_TRACE_BUFFER_SIZE":    true,
	"TORCH_NCCL_DUMP_ON_TIMEOUT":      true,
	"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": true,
	// Set with tracker = "wandb", from the run id: a job may name its
	// tracker's runs itself.
	"WANDB_RUN_ID":    true,
	"WANDB_RESUME":    true,
	"WANDB_RUN_GROUP": true,
}

// TunableEnv reports whether name is one of drover's defaults that
// [job.env] may replace (OMP_NUM_THREADS, NCCL_*, GLOO_*, ...).
func TunableEnv(name string) bool {
	return tunableEnv[name] || strings.HasPrefix(name, "NCCL_") || strings.HasPrefix(name, "GLOO_")
}

// ReservedEnv reports whether drover sets name itself for framework f, so
// that [job.env] may not set it.
func ReservedEnv(f Framework, name string) bool {
	if TunableEnv(name) {
		return false
	}
	if strings.HasPrefix(name, "DROVER_") {
		return true
	}
	for _, r := range reservedEnv[f] {
		if r == name {
			return true
		}
	}
	return false
}
