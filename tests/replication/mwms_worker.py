"""One process of the multi-worker test: trains 5 Adam steps, saves weights.

Run with TF_CONFIG set for multi-worker, or without it for the single-process
reference. Usage: python mwms_worker.py OUT.npz
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from rlplat import replication  # noqa: E402

GLOBAL_BATCH = 16
NUM_STEPS = 5
FEATURES = 6


def main(out_path):
    repl = replication.make_replicator()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * NUM_STEPS, FEATURES)).astype(np.float32)
    y = (x @ rng.normal(size=(FEATURES, 1))).astype(np.float32)

    def input_fn(ctx):
        # Worker w takes every num_input_pipelines-th example: the union over
        # workers of one step's batches is exactly the reference's global batch.
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH))

    with repl.scope():
        init = tf.keras.initializers.GlorotUniform(seed=1)
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(8, activation="tanh", kernel_initializer=init),
            tf.keras.layers.Dense(1, kernel_initializer=init)])
        model.build((None, FEATURES))
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.05)

    def step_fn(batch):
        features, targets = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features) - targets))
        grads = replication.all_reduce(tape.gradient(loss, model.trainable_variables), "mean")
        optimizer.apply_gradients(zip(grads, model.trainable_variables), skip_gradients_aggregation=True)
        return loss

    initial = {f"init{i}": w.numpy() for i, w in enumerate(model.weights)}
    batches = repl.distribute(input_fn)
    losses = [float(repl.run(step_fn, next(batches))) for _ in range(NUM_STEPS)]
    np.savez(out_path, losses=np.array(losses), num_replicas=repl.num_replicas,
             is_chief=repl.is_chief, **initial, **{f"w{i}": w.numpy() for i, w in enumerate(model.weights)})


if __name__ == "__main__":
    main(sys.argv[1])
