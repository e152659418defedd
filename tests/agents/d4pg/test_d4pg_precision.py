"""D4PG under ``precision="bf16"``: one step matches fp32, and checkpoints move between the two.

Parity: an fp32 and a bf16 learner start from the same weights (copied) and
take the same steps on the same fixed batches, at the default network sizes
(the widths bf16 must hold at; its error grows with the inner dimension).
The bars and their reasons are ``tests/precision_parity.py``'s.

What runs in which precision is asserted too: the variables and the
optimizers' slots are float32, the critic's logits and the policy's actions
float32, every wide matrix product of the step bfloat16.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.d4pg.config import D4PGConfig
from rlplat_agents.d4pg.learning import D4PGLearner
from rlplat import replication
from rlplat.utils.checkpointing import Checkpointer

from d4pg_testlib import SPEC, all_weights, batches_dataset, random_batch
from checkpoint_state import checkpointed_state
import precision_parity as parity

STEPS = 4
LR = 1e-3


def _config(precision):
    # Default widths (bf16's error grows with them); a small batch keeps the step cheap.
    return D4PGConfig(global_batch_size=32, min_replay_size=32, policy_learning_rate=LR,
                      critic_learning_rate=LR, target_update_period=1000, precision=precision)


def _learner(precision, batches, steps_per_call=1):
    repl = replication.make_replicator(1)
    return D4PGLearner(_config(precision), SPEC, repl, repl.distribute(batches_dataset(batches)),
                       steps_per_call=steps_per_call)


def _nets(learner):
    return (learner.policy, learner.critic, learner.target_policy, learner.target_critic)


def _copy_weights(src, dst):
    for a, b in zip(all_weights(src), (v for net in _nets(dst) for v in net.variables)):
        b.assign(a)


def _batch_tensors(batch):
    return tuple(tf.constant(x) for x in batch)


@pytest.fixture(scope="module")
def pair():
    tf.keras.utils.set_random_seed(0)
    batches = [random_batch(32, seed=s) for s in range(STEPS)]
    fp32, bf16 = _learner("fp32", batches), _learner("bf16", batches)
    _copy_weights(fp32, bf16)
    return fp32, bf16, batches


def test_bf16_computes_in_bfloat16_and_keeps_float32_state(pair):
    fp32, bf16, batches = pair
    assert bf16.precision.precision == "bf16" and fp32.precision.precision == "fp32"
    for net in _nets(bf16):
        assert {v.dtype for v in net.variables} == {tf.float32}
    obs, act = batches[0].observation, batches[0].action
    assert bf16.critic((obs, act)).dtype == tf.float32 and bf16.policy(obs).dtype == tf.float32
    # The wide products of the step (forward and backward) run in bfloat16; those with a side under
    # MIN_BF16_WIDTH (the observation layer, the 51-atom head, the 1-D action) in float32; none is
    # bfloat16 under fp32.
    products = parity.matmul_dtypes(bf16._grads_fn, _batch_tensors(batches[0]))  # pylint: disable=protected-access
    assert products["bfloat16"] > 20 and products["bfloat16"] > products["float32"] > 0, products
    fp32_products = parity.matmul_dtypes(fp32._grads_fn, _batch_tensors(batches[0]))  # pylint: disable=protected-access
    assert set(fp32_products) == {"float32"}
    assert {s.dtype for s in bf16.critic_optimizer.variables} <= {tf.float32, tf.int64}
    _, served = bf16.get_variables(["policy"])  # what actors receive: float32 arrays
    assert {a.dtype for a in served["policy"]} == {np.dtype(np.float32)}


def test_bf16_losses_and_gradients_match_fp32_on_a_fixed_batch(pair):
    fp32, bf16, batches = pair
    out32 = fp32._grads_fn(_batch_tensors(batches[0]))  # pylint: disable=protected-access
    out16 = bf16._grads_fn(_batch_tensors(batches[0]))  # pylint: disable=protected-access
    parity.assert_losses_match(("critic loss", "policy loss", "mean Q"), out32[:3], out16[:3], atol=1e-2)
    parity.assert_gradients_match("critic", out32[3], out16[3])
    parity.assert_gradients_match("policy", out32[4], out16[4])


def test_bf16_steps_move_the_weights_as_fp32_steps_do(pair):
    fp32, bf16, _ = pair
    before = all_weights(fp32)
    m32 = [fp32.step() for _ in range(STEPS)]
    m16 = [bf16.step() for _ in range(STEPS)]
    assert fp32.num_steps == bf16.num_steps == STEPS
    parity.assert_losses_match([f"critic loss, step {i + 1}" for i in range(STEPS)],
                               [m["critic_loss"] for m in m32], [m["critic_loss"] for m in m16])
    parity.assert_weights_close(all_weights(fp32), all_weights(bf16), LR, STEPS)
    assert not np.allclose(all_weights(fp32)[0], before[0])  # the steps did move the weights


def test_a_bf16_checkpoint_restores_in_fp32_and_back(tmp_path):
    """The variables are float32 under either precision, so a run may change --precision on --resume."""
    batches = [random_batch(32, seed=s) for s in range(2)]
    repl = replication.make_replicator(1)

    def saved_by(learner):
        learner.step()
        Checkpointer(str(tmp_path), **learner.checkpointables()).save(learner.num_steps)
        return checkpointed_state(learner, repl), learner.num_steps

    def restored_as(precision, step):
        learner = _learner(precision, batches)
        Checkpointer(str(tmp_path), **learner.checkpointables()).restore(step)
        assert learner.num_steps == step
        return learner

    want, step = saved_by(_learner("bf16", batches))
    fp32 = restored_as("fp32", step)
    got = checkpointed_state(fp32, repl)
    assert got.keys() == want.keys()
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=str(key))  # bit for bit
    want, step = saved_by(fp32)  # fp32 steps on from the bf16 state ...
    assert step == 2
    got = checkpointed_state(restored_as("bf16", step), repl)  # ... and bf16 takes it back
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=str(key))
