#!/usr/bin/env python3
"""Deterministic, resumable DistributedDataParallel training for drover.

A small MLP learns a synthetic regression task with SGD + momentum. The
script is written so that a run that was killed and resumed from a
checkpoint ends with bit-for-bit the same parameters as a run that was never
interrupted (same world size, same arguments):

* the data set is generated from --seed with a private torch.Generator;
* the batch for global step s is derived from s alone: epoch = s // spe,
  batch = s % spe, with DistributedSampler.set_epoch(epoch) (no wall clock,
  no iterator state to lose);
* no RNG is used while training (no dropout, no augmentation), so there is
  no RNG state to save;
* a checkpoint holds the model, the optimizer (momentum buffers) and the
  step, is written by rank 0 only, atomically (temp file + os.replace), and
  on resume rank 0 reads it and broadcasts it to every rank, so the other
  hosts need no copy of the file.

Environment (set by drover, or by torchrun for its children):
  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT   required
  DROVER_CHECKPOINT_DIR   where rank 0 writes checkpoints (default ./checkpoints)
  DROVER_RESUME_FROM      checkpoint to resume from; empty: start at step 0
  DROVER_RESTART_COUNT    printed, for the logs
  TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID  set by torchrun for its
                          workers; a count > 0 means torchrun restarted them
                          in place, and rank 0 then also considers the newest
                          checkpoint in DROVER_CHECKPOINT_DIR, since
                          DROVER_RESUME_FROM was fixed when torchrun started.
  CUDA_VISIBLE_DEVICES    non-empty and CUDA available: NCCL on a GPU,
                          otherwise gloo on the CPU.
  DROVER_PROGRESS_FILE    rewritten by every rank after each step with
                          "step=N": progress for drover's hang detection
                          (only rank 0 prints while training), and the step
                          and steps/s drover top shows.

Output that tests rely on (stdout, flushed):
  every rank:  rank R/W local_rank L on HOST restart=N
  rank 0:      resumed from PATH at step N   |   starting from step 0
  rank 0:      final loss=%.6f params_sha256=HEX
"""

import argparse
import datetime
import hashlib
import os
import shutil
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, TensorDataset

NUM_SAMPLES = 2048
NUM_FEATURES = 16
HIDDEN = 64


def log(*args):
    # One write per line: under `python3 -u`, print() writes the text and
    # its newline separately, and torchrun's workers share one stdout, so
    # two ranks' lines could interleave mid-line.
    sys.stdout.write(" ".join(str(a) for a in args) + "\n")
    sys.stdout.flush()


def report_progress(step):
    """Tell drover this rank finished step (see hang_timeout and drover
    top). A rank blocked in a collective stops writing, and so does a
    frozen one."""
    path = os.environ.get("DROVER_PROGRESS_FILE")
    if path:
        with open(path, "w") as f:
            f.write(f"step={step}\n")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="total optimizer steps")
    p.add_argument("--ckpt-every", type=int, default=10,
                   help="rank 0 writes a checkpoint every this many steps (0: never)")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--sleep-per-step", type=float, default=0.0,
                   help="seconds to sleep after each step (tests use it to kill mid-run)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--keep", type=int, default=3,
                   help="checkpoints to keep in the checkpoint dir (0: all)")
    p.add_argument("--sharded", action="store_true",
                   help="every rank writes its shard of each checkpoint, as "
                        "torch.distributed.checkpoint does (step-N/__<rank>_0.distcp, "
                        "then step-N/.metadata from rank 0); for checkpoint_layout = \"sharded\"")
    args = p.parse_args(argv)
    if args.steps < 0 or args.ckpt_every < 0 or args.batch_size <= 0 or args.keep < 0:
        p.error("--steps and --ckpt-every must be >= 0, --batch-size > 0, --keep >= 0")
    return args


def env_int(name, default=None):
    v = os.environ.get(name, "")
    if v == "":
        if default is None:
            raise SystemExit(f"train.py: environment variable {name} is not set "
                             "(run under drover or torchrun, or set it by hand)")
        return default
    try:
        return int(v)
    except ValueError:
        raise SystemExit(f"train.py: environment variable {name}={v!r} is not an integer")


def make_dataset(seed):
    """A fixed regression task: y = sin(2 z1) + z2 + noise, z = x.w / sqrt(d)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=g)
    w = torch.randn(NUM_FEATURES, 2, generator=g) / NUM_FEATURES ** 0.5
    z = x @ w
    y = torch.sin(2 * z[:, :1]) + z[:, 1:]
    y = y + 0.05 * torch.randn(NUM_SAMPLES, 1, generator=g)
    return TensorDataset(x, y)


def make_model(seed):
    # Seed only the initialisation, from a private generator state, so that
    # every rank builds the same model (DDP would broadcast rank 0's anyway).
    torch.manual_seed(seed + 1)
    return nn.Sequential(
        nn.Linear(NUM_FEATURES, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, 1),
    )


def params_sha256(model):
    """sha256 over the parameters' float32 bytes, in named_parameters order."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def is_temp_entry(name):
    return name.startswith(".") or name.endswith(".tmp")


def newest_checkpoint(ckpt_dir):
    """The entry drover would pick: newest mtime, temp entries skipped."""
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return ""
    best, best_mtime = "", None
    for n in names:
        if is_temp_entry(n):
            continue
        path = os.path.join(ckpt_dir, n)
        try:
            m = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            continue
        if best_mtime is None or m > best_mtime or (m == best_mtime and path > best):
            best, best_mtime = path, m
    return best


def load_checkpoint(path):
    if not os.path.isfile(path):
        raise SystemExit(
            f"train.py: rank 0: DROVER_RESUME_FROM={path} does not exist on "
            f"{socket.gethostname()} (checkpoints are written by rank 0 on its own "
            "host; was rank 0 placed on another host?)")
    try:
        return torch.load(path, map_location="cpu")
    except Exception as e:  # a torn or foreign file: say which
        raise SystemExit(f"train.py: rank 0: load checkpoint {path}: {e}")


def choose_resume(ckpt_dir):
    """Rank 0: the checkpoint to resume from, loaded, or None."""
    path = os.environ.get("DROVER_RESUME_FROM", "")
    state = load_checkpoint(path) if path else None
    # torchrun restarting its workers in place (its --max_restarts) keeps
    # the environment it was started with, so DROVER_RESUME_FROM may be
    # older than what we wrote since: consider the newest checkpoint in our
    # own dir as well. TORCHELASTIC_RUN_ID tells torchrun's workers apart
    # from drover's plain pytorch processes, which get only the count.
    if os.environ.get("TORCHELASTIC_RUN_ID") and env_int("TORCHELASTIC_RESTART_COUNT", 0) > 0:
        local = newest_checkpoint(ckpt_dir)
        if local and os.path.abspath(local) != os.path.abspath(path or "."):
            cand = load_checkpoint(local)
            if state is None or cand["step"] > state["step"]:
                path, state = local, cand
    return (path, state) if state is not None else (None, None)


def remove_stale_temps(ckpt_dir):
    """Temp files of a writer killed mid-checkpoint (ours only)."""
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return
    for n in names:
        if n.startswith(".step-") and n.endswith(".tmp"):
            try:
                os.remove(os.path.join(ckpt_dir, n))
            except OSError:
                pass


def save_checkpoint(ckpt_dir, step, model, opt, world_size, args, keep):
    os.makedirs(ckpt_dir, exist_ok=True)
    final = os.path.join(ckpt_dir, f"step-{step:06d}.pt")
    tmp = os.path.join(ckpt_dir, f".step-{step:06d}.pt.{os.getpid()}.tmp")
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "world_size": world_size,
        "args": vars(args),
    }
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    try:  # make the rename itself durable
        dfd = os.open(ckpt_dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    if keep > 0:
        old = sorted(n for n in os.listdir(ckpt_dir)
                     if n.startswith("step-") and n.endswith(".pt"))
        for n in old[:-keep]:
            try:
                os.remove(os.path.join(ckpt_dir, n))
            except FileNotFoundError:
                pass
    return final


def state_items(model, opt):
    """The training state as flat (key, tensor) pairs: parameters and
    buffers, then the optimizer's momentum buffers."""
    items = [("model." + k, v) for k, v in model.state_dict().items()]
    for i, st in sorted(opt.state_dict()["state"].items()):
        items.append((f"opt.{i}", st["momentum_buffer"]))
    return items


def save_sharded(ckpt_dir, step, model, opt, rank, world, local_rank, keep):
    """DCP's layout without DCP (torch < 2.0 has none): rank r saves the
    items k with k % world == r as step-N/__r_0.distcp; once every rank
    has, rank 0 writes step-N/.metadata, the marker drover waits for."""
    d = os.path.join(ckpt_dir, f"step-{step:06d}")
    os.makedirs(d, exist_ok=True)
    mine = {k: v.detach().cpu().clone() for n, (k, v) in enumerate(state_items(model, opt)) if n % world == rank}
    tmp = os.path.join(d, f".__{rank}_0.distcp.tmp")
    with open(tmp, "wb") as f:
        torch.save({"step": step, "world_size": world, "items": mine}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d, f"__{rank}_0.distcp"))
    dist.barrier()
    if rank == 0:
        tmp = os.path.join(d, ".metadata.tmp")
        with open(tmp, "w") as f:
            f.write(f"step {step} world_size {world}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(d, ".metadata"))
    if local_rank == 0 and keep > 0:
        old = sorted(n for n in os.listdir(ckpt_dir) if n.startswith("step-") and not n.endswith(".pt"))
        for n in old[:-keep]:
            shutil.rmtree(os.path.join(ckpt_dir, n), ignore_errors=True)
    return d


def load_sharded(path, model, opt):
    """Every rank reads every shard in path (the union drover stages) and
    restores the whole state; returns the step."""
    if not os.path.isfile(os.path.join(path, ".metadata")):
        raise SystemExit(f"train.py: DROVER_RESUME_FROM={path} has no .metadata on {socket.gethostname()}")
    items, step, shards = {}, None, 0
    for n in sorted(os.listdir(path)):
        if n.startswith("__") and n.endswith(".distcp"):
            s = torch.load(os.path.join(path, n), map_location="cpu")
            items.update(s["items"])
            step, shards = s["step"], shards + 1
    want = [k for k, _ in state_items(model, opt)]
    model.load_state_dict({k[len("model."):]: v for k, v in items.items() if k.startswith("model.")})
    sd = opt.state_dict()
    sd["state"] = {int(k[len("opt."):]): {"momentum_buffer": v} for k, v in items.items() if k.startswith("opt.")}
    opt.load_state_dict(sd)
    missing = [k for k in want if k not in items]
    if missing:
        raise SystemExit(f"train.py: {path} lacks {missing} ({shards} shards)")
    return int(step), shards


def broadcast_state(state, device):
    """Rank 0's checkpoint (or None) to every rank."""
    obj = [state]
    dist.broadcast_object_list(obj, src=0, device=device if device.type == "cuda" else None)
    return obj[0]


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(1)
    # Deterministic kernels where torch has them (cuBLAS needs a fixed
    # workspace for that, set before CUDA starts); warn, not fail, elsewhere.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)

    rank = env_int("RANK")
    world = env_int("WORLD_SIZE")
    local_rank = env_int("LOCAL_RANK", 0)
    env_int("MASTER_PORT")  # fail early with a clear message
    if not os.environ.get("MASTER_ADDR"):
        raise SystemExit("train.py: environment variable MASTER_ADDR is not set")
    restart = os.environ.get("DROVER_RESTART_COUNT", "0") or "0"
    ckpt_dir = os.environ.get("DROVER_CHECKPOINT_DIR", "") or os.path.abspath("checkpoints")

    use_cuda = torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", "") != ""
    if use_cuda:
        # drover gives each process one GPU (CUDA_VISIBLE_DEVICES=<id>);
        # torchrun on a multi-GPU host shows all of them: use LOCAL_RANK.
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"

    log(f"rank {rank}/{world} local_rank {local_rank} on {socket.gethostname()} "
        f"restart={restart}")
    dist.init_process_group(backend=backend, init_method="env://", rank=rank,
                            world_size=world, timeout=datetime.timedelta(minutes=5))

    dataset = make_dataset(args.seed)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed, drop_last=True)
    steps_per_epoch = len(sampler) // args.batch_size
    if steps_per_epoch == 0:
        raise SystemExit(f"train.py: --batch-size {args.batch_size} is larger than "
                         f"this rank's share of the data ({len(sampler)} samples)")

    model = make_model(args.seed).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    start_step, resume_path, state = 0, None, None
    if args.sharded:
        # Every rank restores the whole state from the union of shards on
        # its own host; a first step fills the momentum buffers' slots so
        # that the optimizer's state has the keys a checkpoint holds.
        resume = os.environ.get("DROVER_RESUME_FROM", "")
        if resume:
            for p in model.parameters():
                opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
            start_step, shards = load_sharded(resume, model, opt)
            log(f"rank {rank} loaded {shards} shards from {resume}")
            if rank == 0:
                log(f"resumed from {resume} at step {start_step}")
        elif rank == 0:
            log("starting from step 0")
    elif rank == 0:
        remove_stale_temps(ckpt_dir)
        resume_path, state = choose_resume(ckpt_dir)
    if not args.sharded:
        state = broadcast_state(state, device)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_step = int(state["step"])
        if rank == 0:
            log(f"resumed from {resume_path} at step {start_step}")
            if state.get("world_size") != world:
                log(f"warning: checkpoint was written with world size "
                    f"{state.get('world_size')}, now {world}: the data order changes")
    elif rank == 0 and not args.sharded:
        log("starting from step 0")
    del state

    ddp = DDP(model, device_ids=[device.index] if use_cuda else None)
    # Prime DDP's gradient buckets. DDP lays them out in parameter order for
    # the first backward pass and rebuilds them in gradient-ready order
    # before the second. Without this, a run resumed at step k would reduce
    # step k's gradients in the first layout where an uninterrupted run uses
    # the second; with more than two ranks the order of the floating-point
    # sums differs and so do the last bits of the parameters. The primer's
    # gradients are thrown away: no optimizer step, no momentum.
    ddp(dataset.tensors[0][:1].to(device)).sum().backward()
    opt.zero_grad(set_to_none=True)
    loss_fn = nn.MSELoss()
    cached_epoch, indices = None, None
    for step in range(start_step, args.steps):
        epoch, b = divmod(step, steps_per_epoch)
        if epoch != cached_epoch:
            sampler.set_epoch(epoch)
            indices = list(sampler)
            cached_epoch = epoch
        idx = torch.tensor(indices[b * args.batch_size:(b + 1) * args.batch_size])
        x, y = dataset.tensors[0][idx].to(device), dataset.tensors[1][idx].to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        done = step + 1
        report_progress(done)
        if args.sharded and args.ckpt_every > 0 and (done % args.ckpt_every == 0 or done == args.steps):
            path = save_sharded(ckpt_dir, done, model, opt, rank, world, local_rank, args.keep)
            if rank == 0:
                log(f"step {done} loss={loss.item():.6f} checkpoint {path}")
        elif rank == 0 and args.ckpt_every > 0 and (done % args.ckpt_every == 0 or done == args.steps):
            path = save_checkpoint(ckpt_dir, done, model, opt, world, args, args.keep)
            log(f"step {done} loss={loss.item():.6f} checkpoint {path}")
        if args.sleep_per_step > 0:
            time.sleep(args.sleep_per_step)

    if rank == 0:
        with torch.no_grad():
            x, y = dataset.tensors[0].to(device), dataset.tensors[1].to(device)
            final = loss_fn(model(x), y).item()
        log(f"final loss={final:.6f} params_sha256={params_sha256(model)}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
