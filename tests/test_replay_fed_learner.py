"""ReplayFedLearner.STEP_AUTOGRAPH: a researcher's step keeps AutoGraph unless its learner opts out."""

import numpy as np
import pytest
import tensorflow as tf

from rlplat import replication
from rlplat.replay_fed_learner import ReplayFedLearner


class _ClippedSum(ReplayFedLearner):
    """Adds min(sum of the batch, 10) to ``total`` each step, through a Python ``if`` on a tensor."""

    NAME = "clipped sum"
    FIXES = {}

    def __init__(self, repl, batches):
        super().__init__(repl, iter(repl.distribute(tf.data.Dataset.from_tensor_slices(batches))),
                         steps_per_call=2, replay_address=None, replay_table=None,
                         rate_limiter_timeout_ms=0, step_timeout_s=0.0)
        with repl.scope():
            self.total = tf.Variable(0.0, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self._make_step_counter(("sum",))
        self._serve([self.total])

    def _step_fn(self, batch):
        value = tf.reduce_sum(batch)
        if value > 10.0:  # a graph can run this only once AutoGraph has converted the step
            value = tf.constant(10.0)

        def apply(strategy, amount):
            self.total.assign_add(tf.reshape(strategy.experimental_local_results(amount)[0], []))
            self.step_counter.assign_add(1)

        self._guard.apply_if_finite([value], self.step_counter, apply, value)
        return {"value": value}

    def checkpointables(self):
        return {"total": self.total, "learner_steps": self.step_counter}


class _ClippedSumWithoutAutoGraph(_ClippedSum):
    STEP_AUTOGRAPH = False


BATCHES = np.array([[1.0, 2.0], [20.0, 0.0], [3.0, 3.0], [4.0, 4.0]], np.float32)


def test_the_step_is_converted_by_default_so_a_python_if_on_a_tensor_runs():
    learner = _ClippedSum(replication.make_replicator(1), BATCHES)
    learner.trace()
    first, second = learner.step(), learner.step()
    # Sums 3, 20 -> 10, 6, 8: the second call's last step returns 8.
    assert float(learner.total.numpy()) == 3.0 + 10.0 + 6.0 + 8.0
    assert (first["value"], second["value"], second["learner_steps"]) == (10.0, 8.0, 4.0)


def test_a_learner_that_opts_out_runs_its_step_unconverted():
    learner = _ClippedSumWithoutAutoGraph(replication.make_replicator(1), BATCHES)
    with pytest.raises(TypeError, match="tf.Tensor. as a Python .bool."):
        learner.step()
