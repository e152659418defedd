"""D4PG's NaN guard: a NaN mid-call stops the run at that step with the last finite weights.

A NaN reward in the third batch of a 4-step call: the error names step 3
and the critic loss, every variable (networks, targets, Adam slots and
iterations, the step counter; on every replica) equals a reference run
that stopped after step 2, bit for bit, and every checkpoint written
afterwards holds only finite tensors. The same holds under bf16 precision
(bfloat16 products, float32 losses and gradients: the guard reads those).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.d4pg.learning import D4PGLearner
from rlplat import replication
from rlplat.utils import checkpointing

from d4pg_testlib import SPEC, batches_dataset, random_batch, small_config
from checkpoint_state import checkpointed_state

BAD_BATCH = 2  # 0-based: the third step of the call is the first non-finite one


def _batches(bad_row):
    batches = [random_batch(8, seed=s) for s in range(4)]
    batches[BAD_BATCH].reward[bad_row] = np.nan
    return batches


def _learner(repl, batches, steps_per_call, precision="fp32"):
    # A long target period: no copy between calls, so one call is 4 steps.
    return D4PGLearner(small_config(target_update_period=1000, precision=precision), SPEC, repl,
                       repl.distribute(batches_dataset(batches)), steps_per_call=steps_per_call)


def _copy(src, dst):
    nets = lambda learner: (learner.policy, learner.critic, learner.target_policy, learner.target_critic)  # noqa: E731
    for a, b in zip((v for n in nets(src) for v in n.variables), (v for n in nets(dst) for v in n.variables)):
        b.assign(a.numpy())


def _assert_checkpoints_finite(root):
    prefixes = [os.path.join(d, f[:-len(".index")]) for d, _, files in os.walk(root)
                for f in files if f.endswith(".index")]
    assert prefixes
    for prefix in prefixes:
        reader = tf.train.load_checkpoint(prefix)
        for name, dtype in reader.get_variable_to_dtype_map().items():
            if dtype.is_floating:
                assert np.all(np.isfinite(reader.get_tensor(name))), (prefix, name)


# Replica 1 of 2 holds rows 4-7: with 2 replicas only one replica sees the NaN,
# and the all-reduce must make both skip.
@pytest.mark.slow
@pytest.mark.parametrize("num_replicas, bad_row, precision", [(1, 3, "fp32"), (2, 6, "fp32"), (1, 3, "bf16"),
                                                               (2, 6, "bf16")])
def test_nan_mid_call_stops_at_that_step_with_the_last_finite_weights(tmp_path, num_replicas, bad_row, precision):
    repl = replication.make_replicator(num_replicas)
    batches = _batches(bad_row)
    reference = _learner(repl, batches, 2, precision)  # stops after steps 1-2 (both finite)
    learner = _learner(repl, batches, 4, precision)    # steps 1-4 in one call; 3 is NaN
    assert learner.precision.precision == precision
    _copy(reference, learner)
    assert reference.step()["learner_steps"] == 2

    with pytest.raises(FloatingPointError) as error:
        learner.step()
    message = str(error.value)
    assert "\n" not in message and "--resume" not in message
    assert "D4PG: non-finite critic loss" in message and "at learner step 3;" in message
    assert "weights are those of step 2" in message and "lower --critic-learning-rate" in message
    assert learner.num_steps == 2

    want, got = checkpointed_state(reference, repl), checkpointed_state(learner, repl)
    assert want.keys() == got.keys() and len({i for _, i in got}) == num_replicas
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=str(key))  # bit for bit
    assert learner.critic_optimizer.iterations.numpy() == learner.policy_optimizer.iterations.numpy() == 2

    # Stopped for good: another call moves nothing and raises the same step.
    with pytest.raises(FloatingPointError, match="at learner step 3;"):
        learner.step()
    for key, value in want.items():
        np.testing.assert_array_equal(checkpointed_state(learner, repl)[key], value)

    # A checkpoint saved after the error holds the finite weights of step 2.
    checkpointer = checkpointing.Checkpointer(str(tmp_path / "checkpoints"), **learner.checkpointables())
    assert checkpointer.save(learner.num_steps).endswith("ckpt-2")
    _assert_checkpoints_finite(tmp_path)


@pytest.mark.slow
def test_checkpointer_refuses_non_finite_weights_and_writes_nothing(tmp_path):
    repl = replication.make_replicator(1)
    learner = _learner(repl, [random_batch(8)], steps_per_call=1)
    learner.step()
    checkpointer = checkpointing.Checkpointer(str(tmp_path / "checkpoints"), **learner.checkpointables())
    checkpointer.save(1)
    slot = learner.critic_optimizer.variables[1]  # an Adam moment, not a network weight
    good = slot.numpy()
    slot.assign(np.full_like(good, np.inf))
    with pytest.raises(FloatingPointError, match=r"refusing to save checkpoint ckpt-2: variable .* NaN/Inf"):
        checkpointer.save(2)
    assert checkpointer.latest_path.endswith("ckpt-1")
    assert not any(name.startswith("ckpt-2") for name in os.listdir(tmp_path / "checkpoints"))
    _assert_checkpoints_finite(tmp_path)
