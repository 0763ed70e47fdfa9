"""Asserts the worker environment drover gives a pytorch-mode rank.

In the style of torch's own elastic-agent env check
(test/distributed/elastic/agent/server/test/local_elastic_agent_test.py):
every variable torchrun's elastic agent sets for a worker must be there
with torchrun's value for a static launch of one role. Usage:

    envcheck.py JOB_NAME MAX_RESTARTS NPROC_PER_HOST
"""
import os
import sys

import torch
import torch.distributed as dist


def check(name, want):
    got = os.environ.get(name)
    if got != want:
        raise AssertionError(f"{name}={got!r}, want {want!r}")


def main():
    job, max_restarts, per_host = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    node = rank // per_host
    check("LOCAL_RANK", str(rank % per_host))
    check("LOCAL_WORLD_SIZE", str(per_host))
    check("GROUP_RANK", str(node))
    check("NODE_RANK", str(node))
    check("ROLE_NAME", "default")
    check("ROLE_RANK", str(rank))
    check("ROLE_WORLD_SIZE", str(world))
    check("GROUP_WORLD_SIZE", str(world // per_host))
    check("TORCHELASTIC_RESTART_COUNT", "0")
    check("TORCHELASTIC_MAX_RESTARTS", max_restarts)
    check("TORCHELASTIC_RUN_ID", job)
    check("TORCHELASTIC_USE_AGENT_STORE", "False")
    check("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    check("NCCL_ASYNC_ERROR_HANDLING", "1")
    check("OMP_NUM_THREADS", "1" if per_host > 1 else None)
    check("CUDA_VISIBLE_DEVICES", "")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            raise AssertionError(f"{name} is not set")
    err = os.environ["TORCHELASTIC_ERROR_FILE"]
    if not (os.path.isabs(err) and err.endswith(f"/worker-{rank}.json") and os.path.isdir(os.path.dirname(err))):
        raise AssertionError(f"TORCHELASTIC_ERROR_FILE={err!r}: want an absolute path in an existing directory")
    if not dist.is_torchelastic_launched():
        raise AssertionError("torch.distributed.is_torchelastic_launched() is False")
    dist.init_process_group("gloo")  # env://, exactly as under torchrun
    t = torch.tensor([rank])
    dist.all_reduce(t)
    if t.item() != world * (world - 1) // 2:
        raise AssertionError(f"all_reduce gave {t.item()}")
    dist.destroy_process_group()
    print(f"ENVCHECK OK rank {rank} local {local} of {world}", flush=True)


if __name__ == "__main__":
    main()
