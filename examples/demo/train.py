#!/usr/bin/env python3
"""A stand-in for a training job that needs nothing but Python 3's stdlib.

It shows what drover gives a job: every rank knows its rank and the world
size, rank 0 writes checkpoints, and a restarted group resumes from the
newest one. There is no network between the ranks: the "model" is one
integer, and each step every rank computes its share of the step's update
(items i = rank, rank + world, ...) and prints it; the whole update is the
sum of all shares, which every rank also computes for itself, so all ranks
hold the same value and the final value does not depend on the world size.

Environment (set by drover; only RANK/WORLD_SIZE need to be set by hand):
  RANK, WORLD_SIZE          this process and the group size (default 0 and 1)
  DROVER_CHECKPOINT_DIR     where rank 0 writes step-NNNNNN.json (default ./checkpoints)
  DROVER_RESUME_FROM        checkpoint to resume from; empty: start at step 0
  DROVER_RESTART_COUNT      0 on the first attempt, n after n restarts
  DROVER_JOB, DROVER_ROLE   printed

Checkpoints exist only on rank 0's host. Rank 0 loads DROVER_RESUME_FROM
and must find it; another rank loads it if its host has the file, and
otherwise recomputes the state for the step in the file's name
(step-NNNNNN.json) — cheap here, where a real job would receive it from
rank 0 over the network.

--crash-at STEP makes rank --crash-rank (default: the last rank) exit 3 at
that step on the first attempt only (DROVER_RESTART_COUNT=0), so that a
drover demo shows a failure, a restart and a resume.

SIGTERM or SIGINT: the rank prints where it was and exits 143 (130) at once.

Rank 0 ends with the line  final value=<integer>
"""

import argparse
import json
import os
import re
import signal
import socket
import sys
import time

MOD = 1_000_000_007
ITEMS = 64  # items per step, shared out among the ranks


class Terminated(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def log(msg):
    # One write per line, so lines of processes sharing a stdout never
    # interleave (print() under `python3 -u` writes the newline apart).
    sys.stdout.write(f"{msg}\n")
    sys.stdout.flush()


def share(step, rank, world):
    """This rank's part of step's update."""
    return sum((step + 1) * (i + 1) * (i + 1) for i in range(rank, ITEMS, world)) % MOD


def advance(value, step):
    """The state after step, from the state before it."""
    update = sum((step + 1) * (i + 1) * (i + 1) for i in range(ITEMS)) % MOD
    return (value * 31 + update) % MOD


def replay(step):
    """The state after `step` steps, computed from scratch."""
    v = 1
    for s in range(step):
        v = advance(v, s)
    return v


def env_int(name, default):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"demo: environment variable {name}={raw!r} is not an integer")


def write_checkpoint(ckpt_dir, step, value, world):
    os.makedirs(ckpt_dir, exist_ok=True)
    final = os.path.join(ckpt_dir, f"step-{step:06d}.json")
    tmp = os.path.join(ckpt_dir, f".step-{step:06d}.json.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump({"step": step, "value": value, "world_size": world}, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    return final


def read_checkpoint(path):
    with open(path) as f:
        ck = json.load(f)
    if not isinstance(ck.get("step"), int) or not isinstance(ck.get("value"), int):
        raise ValueError("no integer step and value")
    return ck


def resume(path, rank):
    """(step, value, how) from checkpoint path."""
    if os.path.isfile(path):
        try:
            ck = read_checkpoint(path)
        except (OSError, ValueError) as e:
            raise SystemExit(f"demo: rank {rank}: read checkpoint {path}: {e}")
        return ck["step"], ck["value"], "loaded"
    if rank == 0:
        raise SystemExit(f"demo: rank 0: DROVER_RESUME_FROM={path} does not exist on "
                         f"{socket.gethostname()}")
    m = re.search(r"step-(\d+)\.json$", path)
    if not m:
        raise SystemExit(f"demo: rank {rank}: cannot tell the step of {path}")
    step = int(m.group(1))
    return step, replay(step), "recomputed"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--ckpt-every", type=int, default=5)
    p.add_argument("--sleep", type=float, default=0.5, help="seconds per step")
    p.add_argument("--crash-at", type=int, default=-1,
                   help="on the first attempt, crash at this step (default: never)")
    p.add_argument("--crash-rank", type=int, default=-1,
                   help="the rank that crashes (default: the last)")
    args = p.parse_args(argv)

    rank = env_int("RANK", 0)
    world = env_int("WORLD_SIZE", 1)
    if world < 1 or not 0 <= rank < world:
        raise SystemExit(f"demo: RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
    restart = env_int("DROVER_RESTART_COUNT", 0)
    ckpt_dir = os.environ.get("DROVER_CHECKPOINT_DIR", "") or os.path.abspath("checkpoints")
    resume_from = os.environ.get("DROVER_RESUME_FROM", "")
    crash_rank = args.crash_rank if args.crash_rank >= 0 else world - 1

    log(f"rank {rank}/{world} on {socket.gethostname()} job={os.environ.get('DROVER_JOB', '-')} "
        f"role={os.environ.get('DROVER_ROLE', '-')} restart={restart} pid={os.getpid()}")

    def on_signal(signum, _frame):
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    step = 0
    try:
        value = replay(0)
        if resume_from:
            step, value, how = resume(resume_from, rank)
            log(f"rank {rank}: resumed from {resume_from} at step {step} ({how})")
        elif rank == 0:
            log("starting from step 0")
        while step < args.steps:
            if restart == 0 and step == args.crash_at and rank == crash_rank:
                log(f"rank {rank}: crashing at step {step} on purpose (--crash-at)")
                return 3
            part = share(step, rank, world)
            value = advance(value, step)
            step += 1
            log(f"rank {rank}/{world} step {step}/{args.steps} share={part} value={value}")
            if rank == 0 and args.ckpt_every > 0 and (step % args.ckpt_every == 0 or step == args.steps):
                log(f"rank 0: checkpoint {write_checkpoint(ckpt_dir, step, value, world)}")
            if step < args.steps:
                time.sleep(args.sleep)
    except Terminated as t:
        name = signal.Signals(t.signum).name
        log(f"rank {rank}: {name} at step {step}, exiting")
        return 128 + t.signum

    if rank == 0:
        log(f"final value={value}")
    else:
        log(f"rank {rank} done value={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
