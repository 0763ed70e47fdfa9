// Package plan turns a loaded job into the exact processes drover starts.
// It is the only place a process's environment is computed.
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
//     variables and the rest of what torchrun's elastic agent gives a
//     worker (ROLE_*, GROUP_WORLD_SIZE, TORCHELASTIC_*), with torchrun's
//     values for a static launch of one role.
//   - torchrun: one torchrun per host with --nnodes, --node_rank,
//     --nproc_per_node, --master_addr, --master_port and --rdzv_id. A
//     command that starts with a Python interpreter runs as `<python> -m
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
//   - jax: procs_per_host processes per host sharing its GPUs equally,
//     with what jax.distributed.initialize needs (JAX_*; see planJAX).
//
// Every process gets CUDA_VISIBLE_DEVICES, empty when it has no GPU, so
// that a process planned without a GPU (a ps task, a CPU host, a host whose
// GPUs are all busy) never grabs one. For pytorch, torchrun and jax it
// lists every GPU selected on the host, the same for each process there,
// so that LOCAL_RANK indexes it as under torchrun. Every process also gets
// DROVER_JOB, DROVER_HOST, DROVER_ROLE, DROVER_INDEX, DROVER_RESTART_COUNT,
// DROVER_RESUME_FROM and DROVER_CHECKPOINT_DIR, DROVER_DATA_<i> (and
// DROVER_DATA_<NAME>) for each [[data]] set, and, in a run, the run's
// DROVER_RUN_ID and DROVER_ATTEMPT (with tracker = "wandb", the WANDB_*
// ids made from the run id: see runEnv). A process that uses NCCL gets
// NCCL_RAS_ADDR on a port of the job's own and, under PyTorch, the flight
// recorder's variables (nccl.go). [job.env] is added last;
// it may not set a variable drover sets for the rendezvous or identity
// (config.ReservedEnv: a configuration error, not a silent override either way),
// but replaces drover's tunable defaults (config.TunableEnv: OMP_NUM_THREADS,
// NCCL_*, GLOO_*). docs/environment.md's table lists every variable; a
// test keeps it complete.
//
// With the job's container key, each command is last wrapped in the
// runtime's run command (container.go): the host's network and IPC, the
// process's GPUs, the workdir (and a checkpoint directory outside it)
// mounted at its own path, drover's environment passed on by name, the
// login user's uid, and a name and labels drover finds the container by
// to remove it (Process.Container, OrphanFilter).
package plan
