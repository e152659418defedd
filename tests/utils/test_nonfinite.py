"""NonFiniteGuard: the update runs only on finite values, and AutoGraph treats its ``apply_fn`` as the caller's code."""

import numpy as np
import pytest
import tensorflow as tf

from rlplat import replication
from rlplat.utils.nonfinite import NonFiniteGuard


def _guarded_counter(repl):
    with repl.scope():
        guard = NonFiniteGuard(("loss", "gradient"))
        counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                              aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        total = tf.Variable(0.0, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    return guard, counter, total


def test_finite_steps_apply_and_the_first_non_finite_step_stops_every_later_one():
    repl = replication.make_replicator(1)
    guard, counter, total = _guarded_counter(repl)

    def apply(strategy, amount):
        total.assign_add(tf.reshape(strategy.experimental_local_results(amount)[0], []))
        counter.assign_add(1)

    def step(loss, grad):
        return guard.apply_if_finite([loss, grad], counter, apply, loss)

    for loss, grad in ((1.0, 2.0), (3.0, 4.0)):
        assert bool(repl.run(step, tf.constant(loss), tf.constant(grad), reduce=None))
    # Step 3 has a non-finite gradient: nothing moves, and it is recorded as step 3, gradient (bit 1).
    assert not bool(repl.run(step, tf.constant(5.0), tf.constant(np.inf)))
    # A finite step after the failure is skipped too, and the record stays that of the first failure.
    assert not bool(repl.run(step, tf.constant(7.0), tf.constant(np.nan)))
    assert not bool(repl.run(step, tf.constant(1.0), tf.constant(1.0)))
    assert float(total.numpy()) == 4.0 and int(counter.numpy()) == 2
    assert int(guard.failed_step.numpy()) == 3 and int(guard.failed_mask.numpy()) == 0b10
    with pytest.raises(FloatingPointError, match="non-finite gradient at learner step 3; .* those of step 2"):
        guard.raise_if_tripped("test", {})


def _apply_with_python_if(total, counter):
    def apply(strategy, amount):
        amount = tf.reshape(strategy.experimental_local_results(amount)[0], [])
        if amount > 10.0:  # a Python `if` on a tensor: runs in a graph only once AutoGraph converts it
            total.assign_add(10.0)
        else:
            total.assign_add(amount)
        counter.assign_add(1)
    return apply


def test_apply_fn_is_converted_by_autograph_when_the_calling_step_is():
    repl = replication.make_replicator(1)
    guard, counter, total = _guarded_counter(repl)
    apply = _apply_with_python_if(total, counter)

    def step(amount):
        return guard.apply_if_finite([amount, amount], counter, apply, amount)

    repl.run(step, tf.constant(3.0))
    repl.run(step, tf.constant(30.0))
    assert float(total.numpy()) == 3.0 + 10.0 and int(counter.numpy()) == 2


def test_apply_fn_is_left_unconverted_when_the_calling_step_opted_out():
    repl = replication.make_replicator(1)
    guard, counter, total = _guarded_counter(repl)
    apply = _apply_with_python_if(total, counter)

    @tf.autograph.experimental.do_not_convert
    def step(amount):
        return guard.apply_if_finite([amount, amount], counter, apply, amount)

    with pytest.raises(TypeError, match="tf.Tensor. as a Python .bool."):
        repl.run(step, tf.constant(3.0))
