#!/usr/bin/env python3
"""Parameter-server Keras training (tf.distribute.ParameterServerStrategy).

Follows TensorFlow's "Parameter server training with ParameterServerStrategy"
tutorial (the Model.fit variant). One program for every task; TF_CONFIG, as
drover writes it (Kubeflow TFJob format), says which task this process is:

  ps, worker   start a tf.distribute.Server and serve until they are stopped.
               They never exit on their own: the job is done when the chief
               is, and the launcher then stops them.
  chief        the coordinator: builds the model under the strategy (its
               variables live on the ps tasks, sharded when large), and runs
               Model.fit, which dispatches the training steps to the
               workers. It writes the checkpoints and saves the model.
  evaluator    optional sidecar: evaluates every checkpoint the chief writes
               and exits after the last epoch's.

Checkpoints, all written by the chief under $DROVER_CHECKPOINT_DIR:
  backup/          tf.keras.callbacks.BackupAndRestore: restored by the
                   chief when the job is started again (TensorFlow finds it
                   itself, so DROVER_RESUME_FROM is only logged).
  weights/ckpt-E   ModelCheckpoint weights after epoch E, what the sidecar
                   evaluator reads: on a fleet without a shared filesystem
                   the evaluator must run on the chief's host to see them.

A worker that dies is waited for by the coordinator, which re-dispatches its
steps once it is back; a ps or the chief dying fails the job, and drover's
restart brings everyone back with the chief restoring from backup/.

Needs TensorFlow 2.11 or newer with Keras 2: TF 2.11 to 2.15, or TF >= 2.16
with the tf-keras package (this script then sets TF_USE_LEGACY_KERAS=1
before importing TF).

Output: every task prints "task TYPE:INDEX on HOST restart=R"; the chief
ends with "final loss=%.6f" and "saved model to DIR".
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
    p.add_argument("--steps-per-execution", type=int, default=10,
                   help="training steps per function dispatched to a worker")
    p.add_argument("--batch-size", type=int, default=64, help="global batch size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--eval-steps", type=int, default=16,
                   help="batches the evaluator evaluates per checkpoint")
    p.add_argument("--model-dir", default="saved_model",
                   help="where the chief saves the trained model (relative to the workdir)")
    return p.parse_args(argv)


def make_arrays(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((NUM_SAMPLES, NUM_FEATURES)).astype("float32")
    w = (rng.standard_normal((NUM_FEATURES, 2)) / NUM_FEATURES ** 0.5).astype("float32")
    z = x @ w
    y = (np.sin(2 * z[:, :1]) + z[:, 1:] + 0.05 * rng.standard_normal((NUM_SAMPLES, 1))).astype("float32")
    return x, y


def make_model(lr, steps_per_execution=1):
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(NUM_FEATURES,)),
        tf.keras.layers.Dense(64, activation="tanh"),
        tf.keras.layers.Dense(64, activation="tanh"),
        tf.keras.layers.Dense(1),
    ])
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=lr, momentum=0.9),
                  loss="mse", metrics=["mae"], steps_per_execution=steps_per_execution)
    return model


def run_server(resolver):
    """ps and worker tasks: serve the coordinator's requests until stopped."""
    # Report a lost peer to the caller (the coordinator) rather than
    # retrying inside the server.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True)
    log(f"{resolver.task_type}:{resolver.task_id} serving at {server.target}")
    server.join()
    return 0


def run_evaluator(args, ckpt_dir):
    """Sidecar evaluation of every checkpoint the chief writes."""
    x, y = make_arrays(args.seed + 1)  # held-out data from the same task
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(256).repeat()
    model = make_model(args.lr)
    weights_dir = os.path.join(ckpt_dir, "weights")
    log(f"evaluator: watching {weights_dir} for {args.epochs} checkpoints")
    tf.keras.utils.SidecarEvaluator(
        model=model,
        data=data,
        checkpoint_dir=weights_dir,
        steps=args.eval_steps,
        max_evaluations=args.epochs,  # stops after evaluating ckpt-<epochs>
    ).start()
    log("evaluator: done")
    return 0


def run_coordinator(args, resolver, ckpt_dir):
    num_ps = len(resolver.cluster_spec().as_dict().get("ps", []))
    if num_ps == 0:
        raise SystemExit("train.py: TF_CONFIG has no ps tasks; ParameterServerStrategy needs at least one")
    # Large variables are split over the parameter servers (shards of at
    # least 256 KiB, at most one per ps). This model's are small, so the
    # partitioner only matters once it grows.
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=256 << 10, max_shards=num_ps)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)

    if os.environ.get("DROVER_RESUME_FROM"):
        log(f"DROVER_RESUME_FROM={os.environ['DROVER_RESUME_FROM']} "
            "(BackupAndRestore resumes from its own backup)")

    with strategy.scope():
        model = make_model(args.lr, args.steps_per_execution)

    x, y = make_arrays(args.seed)

    def dataset_fn(input_context):
        # Runs on every worker: each one shuffles the data with its own seed
        # and takes its share of the global batch.
        batch = input_context.get_per_replica_batch_size(args.batch_size)
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        ds = ds.shuffle(NUM_SAMPLES).repeat().batch(batch).prefetch(2)
        return ds

    data = tf.keras.utils.experimental.DatasetCreator(dataset_fn)
    callbacks = [
        tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(ckpt_dir, "backup")),
        tf.keras.callbacks.ModelCheckpoint(
            filepath=os.path.join(ckpt_dir, "weights", "ckpt-{epoch}"),
            save_weights_only=True),
    ]
    history = model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                        callbacks=callbacks, verbose=2)

    # Read the variables back from the parameter servers into a local copy
    # of the model and compute the loss on the coordinator itself
    # (Model.predict does not run under ParameterServerStrategy).
    final_model = make_model(args.lr)
    final_model.set_weights(model.get_weights())
    pred = final_model(x, training=False).numpy()
    log(f"final loss={float(np.mean((pred - y) ** 2)):.6f}")
    if history.history.get("loss"):
        log(f"training loss by epoch: {[round(v, 6) for v in history.history['loss']]}")
    # Save the local copy: plain variables, loadable without the cluster.
    final_model.save(args.model_dir)
    log(f"saved model to {os.path.abspath(args.model_dir)}")
    return 0


def main(argv):
    args = parse_args(argv)
    if not os.environ.get("TF_CONFIG"):
        raise SystemExit("train.py: TF_CONFIG is not set: parameter-server training needs a "
                         "cluster (run it under drover, or set TF_CONFIG by hand)")
    try:
        json.loads(os.environ["TF_CONFIG"])
    except ValueError as e:
        raise SystemExit(f"train.py: TF_CONFIG is not JSON: {e}")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    ckpt_dir = os.environ.get("DROVER_CHECKPOINT_DIR", "") or os.path.abspath("checkpoints")
    log(f"task {resolver.task_type}:{resolver.task_id} on {socket.gethostname()} "
        f"restart={os.environ.get('DROVER_RESTART_COUNT', '0') or '0'}")

    if resolver.task_type in ("ps", "worker"):
        return run_server(resolver)
    if resolver.task_type == "evaluator":
        return run_evaluator(args, ckpt_dir)
    if resolver.task_type == "chief":
        return run_coordinator(args, resolver, ckpt_dir)
    raise SystemExit(f"train.py: unknown task type {resolver.task_type!r} in TF_CONFIG "
                     "(want chief, worker, ps or evaluator)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
