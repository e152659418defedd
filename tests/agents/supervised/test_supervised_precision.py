"""The supervised learner under ``precision="bf16"``: its step matches fp32's (``precision_parity``), ``auto``
stays fp32, the NaN guard, checkpoints across precisions.

The parity test uses the default widths (64 -> 512 -> 256 -> 10: bf16's error
grows with them) on one batch of 64 digits; the bars are
``precision_parity``'s. The gradient's error is mostly ReLUs whose input the
rounding moves across zero (0.1-0.2% of them), each passing or stopping its
whole gradient: 2.8-3.8% relative L2 (cosine > 0.999) over init seeds 0-3 and
two batches each, against the 5% bar.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.supervised import data, learning
from rlplat_agents.supervised.config import SupervisedConfig
from rlplat import replication
from rlplat.utils import checkpointing

from checkpoint_state import checkpointed_state
import precision_parity as parity

LR, STEPS, BATCH = 1e-3, 4, 64
# /proc/cpuinfo of a CPU with bfloat16 instructions: there ``auto`` would pick bf16 for an agent with parity.


def _learner(precision_name, **changes):
    config = SupervisedConfig(global_batch_size=BATCH, learning_rate=LR, precision=precision_name, **changes)
    return learning.SupervisedLearner(config, replication.make_replicator(1))


def _state(learner):
    """Every checkpointed variable (weights, batch norm statistics, Adam slots, step), in checkpoint order."""
    return list(checkpointed_state(learner, learner._repl).values())  # pylint: disable=protected-access


def test_bf16_step_matches_fp32_on_a_fixed_batch():
    fp32, bf16 = _learner("fp32"), _learner("bf16")
    assert (fp32.precision.precision, bf16.precision.precision) == ("fp32", "bf16")
    for a, b in zip(fp32.model.variables, bf16.model.variables):
        b.assign(a.numpy())
    train, _ = data.load_splits(0)
    x, y = tf.constant(train.x[:BATCH]), tf.constant(train.y[:BATCH])
    # The hidden layers' products (and their gradients') run in bfloat16, the 10-logit layer's in float32.
    products = parity.matmul_dtypes(tf.function(bf16._loss_and_grads), x, y)  # pylint: disable=protected-access
    assert products["bfloat16"] > 0 and products["float32"] > 0, products
    assert {v.dtype for v in bf16.model.variables} == {tf.float32}
    assert {v.dtype for v in bf16.optimizer.variables if v.dtype.is_floating} == {tf.float32}  # Adam's slots
    loss32, logits32, grads32 = fp32._loss_and_grads(x, y)  # pylint: disable=protected-access
    loss16, logits16, grads16 = bf16._loss_and_grads(x, y)  # pylint: disable=protected-access
    assert logits16.dtype == tf.float32
    parity.assert_losses_match(("loss",), (loss32,), (loss16,))
    parity.assert_gradients_match("classifier", grads32, grads16)
    stream = data.make_input_fn(BATCH, 0)
    batches = {p: replication.make_replicator(1).distribute(stream) for p in ("fp32", "bf16")}
    for step in range(STEPS):
        m32, m16 = fp32.train(batches["fp32"], 1), bf16.train(batches["bf16"], 1)
        parity.assert_losses_match((f"loss, step {step + 1}",), (m32["loss"],), (m16["loss"],))
    assert fp32.step == bf16.step == STEPS
    parity.assert_weights_close([v.numpy() for v in fp32.model.trainable_variables],
                                [v.numpy() for v in bf16.model.trainable_variables], LR, STEPS)


def test_auto_stays_fp32_because_no_parity_is_declared():
    parity.assert_auto_stays_fp32_without_parity(SupervisedConfig)


def test_the_nan_guard_stops_a_bf16_step():
    learner = _learner("bf16", hidden_sizes=(64, 64))
    before = _state(learner)
    x = np.full((BATCH, data.NUM_FEATURES), np.nan, np.float32)
    y = np.zeros((BATCH,), np.int32)
    bad = learner._repl.distribute(  # pylint: disable=protected-access
        lambda ctx: tf.data.Dataset.from_tensors((x, y)).repeat())
    with pytest.raises(FloatingPointError, match=r"^supervised: non-finite loss and gradient at learner step 1;"):
        learner.train(bad, 2)
    assert learner.step == 0
    after = _state(learner)
    assert len(after) == len(before)
    for a, b in zip(before, after):  # weights, Adam's slots and batch norm's statistics
        np.testing.assert_array_equal(a, b)


def _checkpointer(learner, directory):
    return checkpointing.Checkpointer(str(directory), **learner.checkpointables())


def test_a_bf16_checkpoint_restores_in_fp32_and_back(tmp_path):
    stream = data.make_input_fn(BATCH, 0)
    bf16 = _learner("bf16", hidden_sizes=(64, 64))
    bf16.train(bf16._repl.distribute(stream), 1)  # pylint: disable=protected-access
    _checkpointer(bf16, tmp_path / "bf16").save(bf16.step)
    fp32 = _learner("fp32", hidden_sizes=(64, 64))
    assert _checkpointer(fp32, tmp_path / "bf16").restore(1) == 1 and fp32.step == 1
    state16, state32 = _state(bf16), _state(fp32)
    assert len(state16) == len(state32)  # the same variables: no bf16-only state
    for a, b in zip(state16, state32):
        np.testing.assert_array_equal(a, b)
    fp32.train(fp32._repl.distribute(data.make_input_fn(BATCH, 0, start_step=1)), 1)  # pylint: disable=protected-access
    _checkpointer(fp32, tmp_path / "fp32").save(fp32.step)
    back = _learner("bf16", hidden_sizes=(64, 64))
    assert _checkpointer(back, tmp_path / "fp32").restore(2) == 2
    assert back.step == 2 and int(back.optimizer.iterations) == 2
    state32, state_back = _state(fp32), _state(back)
    assert len(state32) == len(state_back)
    for a, b in zip(state32, state_back):
        np.testing.assert_array_equal(a, b)
