"""IMPALA under ``precision="bf16"``: its steps match fp32's (``precision_parity``); checkpoints cross over.

An fp32 and a bf16 learner start from the same weights and take the same
steps on the same fixed batches; the step's losses (total and parts, from
the learner's metrics) and the weights after the steps are compared.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.impala.learning import IMPALALearner
from rlplat import replication

from impala_testlib import CONTINUOUS_SPEC, DISCRETE_SPEC, batches_dataset, random_batch, small_config
import precision_parity as parity

STEPS, LR = 4, 1e-3
LOSSES = ("total_loss", "policy_gradient_loss", "baseline_loss", "entropy_loss")


def _learner(config, spec, batches):
    repl = replication.make_replicator(1)
    return IMPALALearner(config, spec, repl, repl.distribute(batches_dataset(batches)), steps_per_call=1)


def _weights(learner):
    return [v.numpy() for v in learner.network.variables]


@pytest.mark.parametrize("core, spec", [("mlp", CONTINUOUS_SPEC), ("lstm", DISCRETE_SPEC)])
def test_bf16_steps_match_fp32_steps_on_fixed_batches(core, spec):
    # The default torso widths; a few unrolls keep the steps cheap.
    tf.keras.utils.set_random_seed(0)
    configs = {p: small_config(core=core, layer_sizes=(256, 256), learning_rate=LR, max_policy_lag=100,
                               precision=p) for p in ("fp32", "bf16")}
    batches = [random_batch(spec, configs["fp32"], 8, seed=s) for s in range(STEPS)]
    fp32, bf16 = _learner(configs["fp32"], spec, batches), _learner(configs["bf16"], spec, batches)
    assert (fp32.precision.precision, bf16.precision.precision) == ("fp32", "bf16")
    for a, b in zip(fp32.network.variables, bf16.network.variables):
        b.assign(a.numpy())
    obs = tf.constant(batches[0].observation)
    products = parity.matmul_dtypes(tf.function(bf16.network.unroll), obs)
    # 2 torsos: each one's 256-wide product in bfloat16; their observation layers (inputs narrower than
    # bf16_dense.MIN_BF16_WIDTH) and the heads in float32.
    assert products == {"bfloat16": 2, "float32": 4} and bf16.network.unroll(obs)[0].dtype == tf.float32, products
    assert {v.dtype for v in bf16.network.variables} == {tf.float32}
    for step in range(STEPS):
        m32, m16 = fp32.step(), bf16.step()
        parity.assert_losses_match([f"{name}, step {step + 1}" for name in LOSSES],
                                   [m32[n] for n in LOSSES], [m16[n] for n in LOSSES], atol=1e-3)
    parity.assert_weights_close(_weights(fp32), _weights(bf16), LR, STEPS)


def test_a_bf16_checkpoint_restores_in_fp32_and_back(tmp_path):
    config = small_config(max_policy_lag=100)
    batches = [random_batch(DISCRETE_SPEC, config, 8, seed=s) for s in range(2)]
    learners = {p: _learner(config.replace(precision=p), DISCRETE_SPEC, batches) for p in ("bf16", "fp32")}
    learners["bf16"].step()
    path = tf.train.Checkpoint(**learners["bf16"].checkpointables()).save(str(tmp_path / "bf16"))
    tf.train.Checkpoint(**learners["fp32"].checkpointables()).restore(path).assert_consumed()
    for a, b in zip(_weights(learners["bf16"]), _weights(learners["fp32"])):
        np.testing.assert_array_equal(a, b)
    learners["fp32"].step()
    path = tf.train.Checkpoint(**learners["fp32"].checkpointables()).save(str(tmp_path / "fp32"))
    back = _learner(config.replace(precision="bf16"), DISCRETE_SPEC, batches)
    tf.train.Checkpoint(**back.checkpointables()).restore(path).assert_consumed()
    assert back.num_steps == 2
    for a, b in zip(_weights(learners["fp32"]), _weights(back)):
        np.testing.assert_array_equal(a, b)
