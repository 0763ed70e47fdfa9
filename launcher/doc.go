// Package launcher turns a loaded job into processes and keeps them
// running.
//
// The plan (Build) is a pure function from the configuration and each
// host's selected GPUs to the exact processes drover starts: host, role,
// ranks, GPUs, ports, environment and argv. `drover plan` renders it
// (table, env, json); `drover run` starts exactly it, so what a user
// inspects is what runs.
//
// Layout rules, by framework:
//
//   - pytorch: one process per selected GPU, or procs_per_host on a host
//     without GPUs. Ranks are contiguous per host, hosts in file order;
//     spares take no part. Each process gets the torch.distributed env://
//     variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK,
//     LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK).
//   - torchrun: one torchrun per host with --nnodes, --node_rank,
//     --nproc_per_node, --master_addr and --master_port. A command that
//     starts with a Python interpreter runs as `<python> -m
//     torch.distributed.run ... script args` (what the torchrun script
//     itself runs, with the job's interpreter); any other command runs
//     under `torchrun --no_python`.
//   - tensorflow: chief and workers take one slot each (a GPU, or one of
//     procs_per_host CPU slots on hosts without GPUs), GPUs first; ps and
//     evaluator tasks need no GPU and prefer hosts without GPUs. Each task
//     listens on base_port + n, n counting the tasks before it on the same
//     address. TF_CONFIG is exactly what Kubeflow's TFJob operator writes
//     ({"cluster":{...},"task":{"type":...,"index":...},"environment":"cloud"})
//     and is absent when the job has a single task.
//
// Every process gets CUDA_VISIBLE_DEVICES: its GPUs, or empty when it has
// none, so that a process planned without a GPU (a ps task, a CPU host, a
// host whose GPUs are all busy) never grabs one. It also gets DROVER_JOB,
// DROVER_HOST, DROVER_ROLE, DROVER_INDEX, DROVER_RESTART_COUNT,
// DROVER_RESUME_FROM and DROVER_CHECKPOINT_DIR, and TORCHELASTIC_RESTART_COUNT
// for pytorch and torchrun. [job.env] is added last; it may not set a
// variable drover sets (that is a configuration error, not a silent
// override either way).
package launcher
