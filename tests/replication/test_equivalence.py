"""N replicas at global batch B train exactly like one device at batch B.

Also: checkpoints move between replica counts, and synchronized batch norm over
N replicas equals plain batch norm over the global batch.
"""

import numpy as np
import pytest
import tensorflow as tf

from rlplat import replication

GLOBAL_BATCH = 16
NUM_STEPS = 5
FEATURES = 6


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(GLOBAL_BATCH * NUM_STEPS, FEATURES)).astype(np.float32)
    y = (x @ rng.normal(size=(FEATURES, 1)) + 0.3 * rng.normal(size=(len(x), 1))).astype(np.float32)
    return x, y


def _make_model():
    # Fixed initializers make every replica count start from the same weights.
    init = tf.keras.initializers.GlorotUniform(seed=1)
    return tf.keras.Sequential([
        tf.keras.layers.Dense(8, activation="tanh", kernel_initializer=init),
        tf.keras.layers.Dense(1, kernel_initializer=init),
    ])


def _input_fn(x, y):
    def input_fn(ctx):
        per_replica = ctx.get_per_replica_batch_size(GLOBAL_BATCH)
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(per_replica)
    return input_fn


def _train(num_replicas, explicit_all_reduce=True):
    x, y = _data()
    repl = replication.make_replicator(num_replicas=num_replicas)
    with repl.scope():
        model = _make_model()
        model.build((None, FEATURES))
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.05)
    if not explicit_all_reduce:
        repl.wrap_optimizer(optimizer)

    def step_fn(batch):
        features, targets = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features) - targets))
        grads = tape.gradient(loss, model.trainable_variables)
        if explicit_all_reduce:
            grads = replication.all_reduce(grads, "mean")
            optimizer.apply_gradients(zip(grads, model.trainable_variables), skip_gradients_aggregation=True)
        else:
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    batches = repl.distribute(_input_fn(x, y))
    losses = [float(repl.run(step_fn, next(batches))) for _ in range(NUM_STEPS)]
    return [w.numpy() for w in model.weights], losses


@pytest.fixture(scope="module")
def single_device_result():
    return _train(1)


@pytest.mark.parametrize("n", [2, 4])
def test_adam_steps_on_n_replicas_match_one_device(n, single_device_result):
    ref_weights, ref_losses = single_device_result
    weights, losses = _train(n)
    # The loss must actually move, or equality would prove nothing.
    assert ref_losses[-1] < ref_losses[0]
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-5)
    for got, want in zip(weights, ref_weights):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# Four replicas on two cores: slow, and slower still when the cores are busy.
@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_wrap_optimizer_matches_explicit_all_reduce(n, single_device_result):
    ref_weights, _ = single_device_result
    weights, _ = _train(n, explicit_all_reduce=False)
    for got, want in zip(weights, ref_weights):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_without_averaging_replicas_diverge_from_one_device(single_device_result):
    # Guard against a vacuous equivalence test: Keras' default aggregation SUMs
    # gradients, which with 4 replicas is a different (4x) update.
    x, y = _data()
    repl = replication.make_replicator(num_replicas=4)
    with repl.scope():
        model = _make_model()
        model.build((None, FEATURES))
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)

    def step_fn(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch[0]) - batch[1]))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    batches = repl.distribute(_input_fn(x, y))
    for _ in range(NUM_STEPS):
        repl.run(step_fn, next(batches))
    ref_weights, _ = single_device_result
    assert not np.allclose(model.weights[0].numpy(), ref_weights[0], atol=1e-5)


def test_wrap_optimizer_rejects_legacy_optimizers():
    with pytest.raises(TypeError, match="Keras 2 optimizer"):
        replication.wrap_optimizer(tf.keras.optimizers.legacy.Adam())


@pytest.mark.slow
@pytest.mark.parametrize("restore_replicas", [1, 2])
def test_checkpoint_from_four_replicas_restores_into_fewer(tmp_path, restore_replicas):
    x, y = _data()
    repl4 = replication.make_replicator(num_replicas=4)
    with repl4.scope():
        model = _make_model()
        model.build((None, FEATURES))
        optimizer = tf.keras.optimizers.Adam(learning_rate=0.05)

    def step_fn(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch[0]) - batch[1]))
        grads = replication.all_reduce(tape.gradient(loss, model.trainable_variables), "mean")
        optimizer.apply_gradients(zip(grads, model.trainable_variables), skip_gradients_aggregation=True)
        return loss

    batches = repl4.distribute(_input_fn(x, y))
    for _ in range(3):
        repl4.run(step_fn, next(batches))
    path = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "ckpt"))

    repl = replication.make_replicator(num_replicas=restore_replicas)
    with repl.scope():
        restored = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="tanh"), tf.keras.layers.Dense(1)])
        restored.build((None, FEATURES))
        restored_opt = tf.keras.optimizers.Adam(learning_rate=0.05)
        restored_opt.build(restored.trainable_variables)
    tf.train.Checkpoint(model=restored, optimizer=restored_opt).restore(path).assert_consumed()
    for got, want in zip(restored.weights, model.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert int(restored_opt.iterations.numpy()) == 3
    # Slot variables (Adam moments) came back too, not only the weights.
    np.testing.assert_array_equal(restored_opt.variables[1].numpy(), optimizer.variables[1].numpy())


@pytest.mark.parametrize("n", [2, 4])
def test_sync_batch_norm_matches_batch_norm_on_the_global_batch(n):
    rng = np.random.default_rng(3)
    # Replicas see batches with different means, so local statistics would differ.
    x = (rng.normal(size=(GLOBAL_BATCH, FEATURES)) * 3
         + np.repeat(np.arange(n), GLOBAL_BATCH // n)[:, None]).astype(np.float32)

    plain = tf.keras.layers.BatchNormalization(momentum=0.5)
    want = plain(x, training=True).numpy()

    repl = replication.make_replicator(num_replicas=n)
    with repl.scope():
        synced = tf.keras.layers.BatchNormalization(momentum=0.5, synchronized=True)
        synced.build((None, FEATURES))

    def input_fn(ctx):
        return tf.data.Dataset.from_tensor_slices(x).batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH))

    batch = next(repl.distribute(input_fn))
    out = repl.run(lambda b: synced(b, training=True), batch, reduce=None)
    got = np.concatenate([v.numpy() for v in repl.strategy.experimental_local_results(out)], 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(synced.moving_mean.numpy(), plain.moving_mean.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(synced.moving_variance.numpy(), plain.moving_variance.numpy(), rtol=1e-4)

    # Unsynchronized batch norm normalizes each replica by its own statistics: different output.
    with repl.scope():
        local = tf.keras.layers.BatchNormalization(momentum=0.5)
        local.build((None, FEATURES))
    out_local = repl.run(lambda b: local(b, training=True), batch, reduce=None)
    got_local = np.concatenate([v.numpy() for v in repl.strategy.experimental_local_results(out_local)], 0)
    assert not np.allclose(got_local, want, atol=1e-2)
