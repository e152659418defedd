"""The supervised learner's NaN guard: a NaN mid-call leaves exactly the previous step's model."""

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.supervised import data, learning
from rlplat_agents.supervised.config import SupervisedConfig
from rlplat import replication
from checkpoint_state import checkpointed_state

BAD_STEP = 3  # 1-based: the third step of a 4-step call


def _batches(repl, config, poison):
    make = data.make_input_fn(config.global_batch_size, config.seed)
    n = repl.num_replicas

    def input_fn(ctx):
        # Per-replica batches come in global-step order, replica by replica:
        # poison the last replica's part of step BAD_STEP only.
        bad = (BAD_STEP - 1) * n + n - 1

        def inject(i, batch):
            x, y = batch
            return tf.where(tf.equal(i, bad) & poison, tf.fill(tf.shape(x), np.nan), x), y

        return make(ctx).enumerate().map(inject)

    return repl.distribute(input_fn)


@pytest.mark.slow
@pytest.mark.parametrize("num_replicas", [1, 2])
def test_nan_input_mid_call_keeps_the_previous_model_and_batch_norm_statistics(num_replicas):
    config = SupervisedConfig(hidden_sizes=(32, 16), global_batch_size=32)
    repl = replication.make_replicator(num_replicas)
    reference = learning.SupervisedLearner(config, repl)  # seeded: same initial weights
    learner = learning.SupervisedLearner(config, repl)
    reference.train(_batches(repl, config, poison=True), BAD_STEP - 1)
    with pytest.raises(FloatingPointError) as error:
        learner.train(_batches(repl, config, poison=True), 4)
    message = str(error.value)
    assert message.startswith(f"supervised: non-finite loss and gradient at learner step {BAD_STEP};")
    assert "\n" not in message and "--resume" not in message and "lower --learning-rate" in message
    assert learner.step == BAD_STEP - 1
    want, got = checkpointed_state(reference, repl), checkpointed_state(learner, repl)
    assert want.keys() == got.keys()
    assert any("moving_mean" in name for name, _ in got)  # batch norm's statistics are compared too
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=str(key))
