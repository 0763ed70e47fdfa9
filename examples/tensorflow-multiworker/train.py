#!/usr/bin/env python3
"""Synchronous multi-worker Keras training (MultiWorkerMirroredStrategy).

Follows TensorFlow's "Multi-worker training with Keras" tutorial, with the
cluster described by TF_CONFIG as drover writes it (Kubeflow TFJob format):

  {"cluster": {"chief": ["h1:2222"], "worker": ["h1:2223", "h2:2222"]},
   "task": {"type": "worker", "index": 0}, "environment": "cloud"}

Every task (chief and workers alike) runs this same program; the strategy
all-reduces gradients among them, so all of them must be up for training to
make progress, and a lost task stalls the others until drover restarts the
group. Fault tolerance comes from tf.keras.callbacks.BackupAndRestore: it
backs the training state up into $DROVER_CHECKPOINT_DIR/backup at the end of
every epoch (or every --backup-every steps) and, when the group is started
again, restores it and carries on from the interrupted epoch. TensorFlow
finds the backup by itself, so DROVER_RESUME_FROM is only logged.

On a fleet without a shared filesystem every task keeps its own backup on its
own disk: the chief's is the one that counts, and a worker whose disk has no
backup would start over at epoch 0 and disagree with the chief. Put
DROVER_CHECKPOINT_DIR on a shared filesystem (NFS, a mounted bucket) for
multi-host runs that must survive restarts, or accept starting over.

At the end the chief saves the model (SavedModel) to --model-dir; the other
workers save to a temporary directory and delete it, because saving may run
collective operations that every worker has to join.

Needs TensorFlow 2.11 or newer with Keras 2: TF 2.11 to 2.15, or TF >= 2.16 with the tf-keras
package (this script then sets TF_USE_LEGACY_KERAS=1 before importing TF).

Output: every task prints "task TYPE:INDEX of N workers on HOST restart=R";
the chief ends with "final loss=%.6f" and "saved model to DIR".
"""

import argparse
import importlib.util
import json
import os
import socket
import sys

if importlib.util.find_spec("tf_keras") is not None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

NUM_SAMPLES = 4096
NUM_FEATURES = 16


def log(msg):
    # One write per line, so lines of processes sharing a stdout never
    # interleave (print() under `python3 -u` writes the newline apart).
    sys.stdout.write(f"{msg}\n")
    sys.stdout.flush()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=32, help="per-worker batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--backup-every", type=int, default=0,
                   help="back up every this many steps (0: at the end of every epoch)")
    p.add_argument("--model-dir", default="saved_model",
                   help="where the chief saves the trained model (relative to the workdir)")
    return p.parse_args(argv)


def tf_config():
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return {}, None, 0
    try:
        cfg = json.loads(raw)
    except ValueError as e:
        raise SystemExit(f"train.py: TF_CONFIG is not JSON: {e}")
    task = cfg.get("task") or {}
    return cfg.get("cluster") or {}, task.get("type"), int(task.get("index", 0))


def is_chief(cluster, task_type, task_id):
    """The chief task, or worker 0 of a cluster without one, or a lone process."""
    if task_type is None or task_type == "chief":
        return True
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def write_dir(path, chief, task_type, task_id):
    """Where this task writes path: the path itself on the chief, a private
    temporary directory next to it elsewhere (deleted after writing)."""
    if chief:
        return path
    parent, base = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".tmp-{task_type}-{task_id}", base)


def make_dataset(seed, global_batch):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((NUM_SAMPLES, NUM_FEATURES)).astype("float32")
    w = (rng.standard_normal((NUM_FEATURES, 2)) / NUM_FEATURES ** 0.5).astype("float32")
    z = x @ w
    y = (np.sin(2 * z[:, :1]) + z[:, 1:] + 0.05 * rng.standard_normal((NUM_SAMPLES, 1))).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.shuffle(NUM_SAMPLES, seed=seed, reshuffle_each_iteration=True).repeat().batch(global_batch)
    options = tf.data.Options()
    # Each worker reads the whole (small, in-memory) data set and keeps
    # every n-th batch.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options), (x, y)


def make_model(lr):
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(NUM_FEATURES,)),
        tf.keras.layers.Dense(64, activation="tanh"),
        tf.keras.layers.Dense(64, activation="tanh"),
        tf.keras.layers.Dense(1),
    ])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=lr, momentum=0.9),
                  loss="mse")
    return model


def main(argv):
    args = parse_args(argv)
    cluster, task_type, task_id = tf_config()
    chief = is_chief(cluster, task_type, task_id)

    # The strategy must exist before any other TensorFlow operation.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    tf.keras.utils.set_random_seed(args.seed)

    ckpt_dir = os.environ.get("DROVER_CHECKPOINT_DIR", "") or os.path.abspath("checkpoints")
    log(f"task {task_type or 'local'}:{task_id} of {workers} workers on "
        f"{socket.gethostname()} restart={os.environ.get('DROVER_RESTART_COUNT', '0') or '0'}")
    if os.environ.get("DROVER_RESUME_FROM") and chief:
        log(f"DROVER_RESUME_FROM={os.environ['DROVER_RESUME_FROM']} "
            "(BackupAndRestore resumes from its own backup)")

    dataset, (x, y) = make_dataset(args.seed, args.batch_size * workers)
    with strategy.scope():
        model = make_model(args.lr)

    backup_dir = os.path.join(ckpt_dir, "backup")
    callbacks = [
        tf.keras.callbacks.BackupAndRestore(
            backup_dir=backup_dir,
            save_freq=args.backup_every if args.backup_every > 0 else "epoch",
            delete_checkpoint=False),
    ]
    history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                        callbacks=callbacks, verbose=2 if chief else 0)

    # Saving may run collectives: every worker saves, only the chief keeps it.
    target = write_dir(args.model_dir, chief, task_type, task_id)
    model.save(target)
    if not chief:
        tf.io.gfile.rmtree(os.path.dirname(target))
    if chief:
        # A plain local forward pass: model.evaluate would be a collective
        # step that the other workers do not join.
        pred = model(x, training=False).numpy()
        final = float(np.mean((pred - y) ** 2))
        log(f"final loss={final:.6f}")
        log(f"saved model to {os.path.abspath(target)}")
        if history.history.get("loss"):
            log(f"training loss by epoch: {[round(v, 6) for v in history.history['loss']]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
