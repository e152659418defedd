"""Checkpointer: portable across replica counts, chief-only files, step from the name."""

import os

import numpy as np
import pytest
import tensorflow as tf

from rlplat import replication
from rlplat.utils import checkpointing


def _build(repl):
    with repl.scope():
        model = tf.keras.Sequential([
            tf.keras.Input((3,)),
            tf.keras.layers.Dense(4),
            tf.keras.layers.BatchNormalization(synchronized=True),
            tf.keras.layers.Dense(1),
        ])
        optimizer = tf.keras.optimizers.Adam(0.1)
        optimizer.build(model.trainable_variables)
    return model, optimizer


def _train_one_step(repl, model, optimizer):
    def step_fn(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True)))
        grads = repl.all_reduce(tape.gradient(loss, model.trainable_variables), "mean")
        optimizer.apply_gradients(zip(grads, model.trainable_variables), skip_gradients_aggregation=True)
        return loss

    def input_fn(ctx):
        x = tf.random.stateless_normal([8, 3], seed=[1, 2])
        return tf.data.Dataset.from_tensor_slices(x).batch(ctx.get_per_replica_batch_size(8)).repeat()

    repl.run(step_fn, next(repl.distribute(input_fn)))


def _values(model, optimizer):
    return [v.numpy() for v in model.variables] + [v.numpy() for v in optimizer.variables]


def test_saved_under_four_replicas_restores_under_one(tmp_path):
    four = replication.make_replicator(num_replicas=4)
    model, optimizer = _build(four)
    _train_one_step(four, model, optimizer)
    saved = _values(model, optimizer)
    path = checkpointing.Checkpointer(str(tmp_path), model=model, optimizer=optimizer).save(7)
    assert path.endswith("ckpt-7")

    one = replication.make_replicator(num_replicas=1)
    model1, optimizer1 = _build(one)
    assert not all(np.array_equal(a, b) for a, b in zip(saved, _values(model1, optimizer1)))
    step = checkpointing.Checkpointer(str(tmp_path), model=model1, optimizer=optimizer1).restore_latest()
    assert step == 7
    assert int(optimizer1.iterations.numpy()) == 1
    for a, b in zip(saved, _values(model1, optimizer1)):
        np.testing.assert_array_equal(a, b)


def test_non_chief_saves_but_leaves_no_files(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    written = []
    original = tf.train.Checkpoint.write
    monkeypatch.setattr(tf.train.Checkpoint, "write",
                        lambda self, prefix, **kw: written.append(original(self, prefix, **kw)))
    variable = tf.Variable(3.0)
    ckpt = checkpointing.Checkpointer(str(tmp_path / "ckpts"), is_chief=False, v=variable)
    assert ckpt.save(1) is None
    assert len(written) == 1 and written[0].startswith(str(scratch))  # it really wrote...
    assert not (tmp_path / "ckpts").exists()
    assert list(scratch.iterdir()) == []  # ...and deleted it


def test_restore_latest_without_checkpoint_and_max_to_keep(tmp_path):
    variable = tf.Variable(0.0)
    ckpt = checkpointing.Checkpointer(str(tmp_path), max_to_keep=2, v=variable)
    assert ckpt.restore_latest() is None
    for step in (10, 20, 30):
        variable.assign(float(step))
        ckpt.save(step)
    variable.assign(-1.0)
    assert ckpt.restore_latest() == 30 and variable.numpy() == 30.0
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".index")) == ["ckpt-20.index", "ckpt-30.index"]


def test_restore_fails_loudly_on_a_mismatched_checkpoint(tmp_path):
    checkpointing.Checkpointer(str(tmp_path), v=tf.Variable([1.0, 2.0])).save(1)
    with pytest.raises((ValueError, AssertionError)):
        checkpointing.Checkpointer(str(tmp_path), v=tf.Variable([1.0, 2.0, 3.0])).restore_latest()
    with pytest.raises(ValueError, match="ckpt-<step>"):
        checkpointing.step_of("/x/model.ckpt")


def test_restore_keeps_the_learning_rate_the_optimizer_was_built_with(tmp_path):
    # A resume (or a PBT exploit) with a new --*-learning-rate must learn at that rate,
    # while Adam's moments and iterations come back from the checkpoint.
    from rlplat.utils.optimizers import FusedAdam

    var = tf.Variable([1.0, 2.0])
    saved_opt = FusedAdam(1e-3)
    saved_opt.apply_gradients([(tf.constant([0.5, -0.5]), var)])
    saved_opt.apply_gradients([(tf.constant([0.25, 0.25]), var)])
    checkpointing.Checkpointer(str(tmp_path), var=var, optimizer=saved_opt).save(2)
    moments = [v.numpy() for v in saved_opt.variables]

    var2 = tf.Variable([0.0, 0.0])
    new_opt = FusedAdam(5e-4)
    new_opt.build([var2])
    checkpointing.Checkpointer(str(tmp_path), var=var2, optimizer=new_opt).restore(2)
    assert float(new_opt.learning_rate) == pytest.approx(5e-4)
    assert int(new_opt.iterations) == 2
    restored = [v.numpy() for v in new_opt.variables]
    for before, after in zip(moments, restored):
        if np.ndim(before):  # the slots (the scalar rate and step are checked above)
            np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(var2.numpy(), var.numpy())
    # The next update runs at the new rate: Adam's first step size is about lr.
    before = var2.numpy().copy()
    new_opt.apply_gradients([(tf.constant([1.0, 1.0]), var2)])
    assert np.all(np.abs(var2.numpy() - before) < 2 * 5e-4)
