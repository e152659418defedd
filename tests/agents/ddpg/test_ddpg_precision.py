"""DDPG under ``precision="bf16"``: the step matches fp32's (``precision_parity``), NaN guard, checkpoints.

The networks are the default widths (bf16's error grows with them); the
batch is small to keep the steps cheap. One bar is wider than
``precision_parity``'s: the policy gradient at initialisation. DDPG's critic
output layer starts within +-3e-3, so dQ/da is a nearly cancelling sum over
the hidden units, tiny next to its terms, and its bf16 relative error was
0.8-7% over init seeds 0-7 (cosine >= 0.997) while the critic's stayed at
0.16%; ``POLICY_GRAD_RTOL`` is 10%.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from ddpg_testlib import all_weights, copy_weights, make_learner, random_batch, small_config
import precision_parity as parity

LR, STEPS = 1e-3, 4
POLICY_GRAD_RTOL, POLICY_GRAD_MIN_COSINE = 0.1, 0.99


def _config(precision):
    return small_config(policy_layer_sizes=(256, 256), critic_layer_sizes=(256, 256), global_batch_size=32,
                        min_replay_size=32, precision=precision)


def _batch_tensors(batch):
    return tuple(tf.constant(x) for x in batch)


def test_bf16_matches_fp32_on_fixed_batches():
    tf.keras.utils.set_random_seed(0)
    batches = [random_batch(32, seed=s) for s in range(STEPS)]
    fp32 = make_learner(_config("fp32"), batches, steps_per_call=1)
    bf16 = make_learner(_config("bf16"), batches, steps_per_call=1)
    assert (fp32.precision.precision, bf16.precision.precision) == ("fp32", "bf16")
    copy_weights(fp32, bf16)
    # The hidden layers' products run in bfloat16 (the output layers' are float32), not the state.
    products = parity.matmul_dtypes(tf.function(bf16._losses_and_grads),  # pylint: disable=protected-access
                                    _batch_tensors(batches[0]))
    assert products["bfloat16"] > 0 and products["float32"] > 0, products  # narrow layers stay float32
    assert {v.dtype for v in bf16.critic.variables + bf16.policy.variables} == {tf.float32}
    out32 = fp32._losses_and_grads(_batch_tensors(batches[0]))  # pylint: disable=protected-access
    out16 = bf16._losses_and_grads(_batch_tensors(batches[0]))  # pylint: disable=protected-access
    parity.assert_losses_match(("critic loss", "policy loss", "mean Q"), out32[:3], out16[:3], atol=1e-4)
    parity.assert_gradients_match("critic", out32[3], out16[3])
    parity.assert_gradients_match("policy", out32[4], out16[4], POLICY_GRAD_RTOL, POLICY_GRAD_MIN_COSINE)
    m32 = [fp32.step() for _ in range(STEPS)]
    m16 = [bf16.step() for _ in range(STEPS)]
    parity.assert_losses_match([f"critic loss, step {i + 1}" for i in range(STEPS)],
                               [m["critic_loss"] for m in m32], [m["critic_loss"] for m in m16])
    parity.assert_weights_close(all_weights(fp32), all_weights(bf16), LR, STEPS)


def test_the_nan_guard_stops_a_bf16_step():
    bad = random_batch(8)
    bad.reward[3] = np.nan
    learner = make_learner(small_config(precision="bf16"), [bad], steps_per_call=2)
    before = all_weights(learner)
    with pytest.raises(FloatingPointError, match=r"DDPG: non-finite critic loss .*at learner step 1; "):
        learner.step()
    assert learner.num_steps == 0
    for a, b in zip(before, all_weights(learner)):
        np.testing.assert_array_equal(a, b)


def test_a_bf16_checkpoint_restores_in_fp32_and_back(tmp_path):
    batches = [random_batch(8, seed=s) for s in range(2)]
    bf16 = make_learner(small_config(precision="bf16"), batches, steps_per_call=1)
    bf16.step()
    path = tf.train.Checkpoint(**bf16.checkpointables()).save(str(tmp_path / "bf16"))
    fp32 = make_learner(small_config(precision="fp32"), batches, steps_per_call=1)
    tf.train.Checkpoint(**fp32.checkpointables()).restore(path).assert_consumed()
    for a, b in zip(all_weights(bf16), all_weights(fp32)):
        np.testing.assert_array_equal(a, b)
    fp32.step()
    assert fp32.num_steps == 2
    path = tf.train.Checkpoint(**fp32.checkpointables()).save(str(tmp_path / "fp32"))
    back = make_learner(small_config(precision="bf16"), batches, steps_per_call=1)
    tf.train.Checkpoint(**back.checkpointables()).restore(path).assert_consumed()
    assert back.num_steps == 2 and int(back.critic_optimizer.iterations) == 2
    for a, b in zip(all_weights(fp32), all_weights(back)):
        np.testing.assert_array_equal(a, b)
