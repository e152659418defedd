"""IMPALA's NaN guard: a NaN mid-call stops the run at that step with the last finite weights."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from rlplat_agents.impala.learning import IMPALALearner
from rlplat import replication

from impala_testlib import DISCRETE_SPEC, batches_dataset, random_batch, small_config
from checkpoint_state import checkpointed_state


# With 2 replicas, unroll 6 is on replica 1 only: the all-reduce makes both skip.
@pytest.mark.slow
@pytest.mark.parametrize("num_replicas, bad_unroll, precision", [(1, 1, "fp32"), (2, 6, "fp32"), (1, 1, "bf16")])
def test_nan_reward_mid_call_stops_at_that_step_with_the_last_finite_weights(num_replicas, bad_unroll, precision):
    config = small_config(max_policy_lag=100, precision=precision)
    batches = [random_batch(DISCRETE_SPEC, config, 8, seed=s) for s in range(4)]
    batches[2].reward[bad_unroll, 2] = np.nan  # the third step of the call
    repl = replication.make_replicator(num_replicas)
    make = lambda n: IMPALALearner(config, DISCRETE_SPEC, repl,  # noqa: E731
                                   repl.distribute(batches_dataset(batches)), steps_per_call=n)
    reference, learner = make(2), make(4)
    for a, b in zip(reference.network.variables, learner.network.variables):
        b.assign(a.numpy())
    reference.step()
    assert reference.num_steps == 2

    with pytest.raises(FloatingPointError) as error:
        learner.step()
    message = str(error.value)
    assert "\n" not in message and "--resume" not in message
    assert message.startswith("IMPALA: non-finite ") and "at learner step 3;" in message
    assert "baseline loss" in message and "lower --learning-rate" in message
    assert learner.num_steps == 2 and learner.num_dropped == reference.num_dropped
    want, got = checkpointed_state(reference, repl), checkpointed_state(learner, repl)
    assert want.keys() == got.keys()
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value, err_msg=str(key))
