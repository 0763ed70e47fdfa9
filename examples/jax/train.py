"""Data-parallel linear regression with JAX across hosts, under drover.

drover starts this once per host (framework = "jax") with:
  JAX_COORDINATOR_ADDRESS  first host's address:master_port (jax reads it)
  JAX_NUM_PROCESSES        number of processes in the job
  JAX_PROCESS_ID           this process, 0..N-1
  JAX_LOCAL_DEVICE_IDS     this process's devices among CUDA_VISIBLE_DEVICES
                           (recent jax reads it itself; passed explicitly
                           so that older releases narrow devices too)
  DROVER_CHECKPOINT_DIR    where process 0 writes checkpoints
  DROVER_RESUME_FROM       the newest complete checkpoint, or empty

jax.distributed.initialize() reads the coordinator address and the local
device ids itself, but takes the process count and id only as arguments
(or from Slurm/Open MPI/TPU metadata), so they are passed from the
environment. Every process computes gradients on its devices' shard of the
batch; pmap's pmean averages them over every device of every host.
"""
import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np


def init_distributed():
    ids = os.environ.get("JAX_LOCAL_DEVICE_IDS")
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
        local_device_ids=[int(i) for i in ids.split(",")] if ids else None,
    )


def batch(step, n, dim, true_w):
    rng = np.random.default_rng(step)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return x, x @ true_w


def save(params, step):
    d = os.environ["DROVER_CHECKPOINT_DIR"]
    os.makedirs(d, exist_ok=True)
    final = os.path.join(d, f"step-{step:06d}.npz")
    tmp = final + ".tmp.npz"  # drover ignores temporary names
    np.savez(tmp, w=np.asarray(params), step=step)
    os.replace(tmp, final)


def load():
    path = os.environ.get("DROVER_RESUME_FROM", "")
    if not path:
        return None, 0
    with np.load(path) as ck:
        return jnp.asarray(ck["w"]), int(ck["step"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()

    init_distributed()
    dim, per_device = 8, 32
    true_w = np.arange(dim, dtype=np.float32)
    w, start = load()
    if w is None:
        w = jnp.zeros(dim)
    print(f"process {jax.process_index()} of {jax.process_count()}: "
          f"{jax.local_device_count()} local / {jax.device_count()} devices; start at step {start}", flush=True)

    def loss(w, x, y):
        return jnp.mean((x @ w - y) ** 2)

    def update(w, x, y):
        g = jax.lax.pmean(jax.grad(loss)(w, x, y), axis_name="devices")
        return w - args.lr * g

    step_fn = jax.pmap(update, axis_name="devices", in_axes=(None, 0, 0))
    local = jax.local_device_count()
    first = jax.process_index() * local
    for step in range(start, args.steps):
        x, y = batch(step, per_device * jax.device_count(), dim, true_w)
        # This process's devices take their rows of the global batch.
        rows = slice(first * per_device, (first + local) * per_device)
        xs = x[rows].reshape(local, per_device, dim)
        ys = y[rows].reshape(local, per_device)
        w = step_fn(w, xs, ys)[0]
        if (step + 1) % args.ckpt_every == 0 and jax.process_index() == 0:
            save(w, step + 1)
            print(f"step {step + 1}: loss {float(loss(w, x, y)):.6f}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
