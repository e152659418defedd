"""The learners' NaN guard: an update is applied only when its losses and gradients are finite.

A learner step computes its losses and gradients, all-reduces them, and
then calls ``NonFiniteGuard.apply_if_finite`` (in replica context) with the
quantities to watch: replica-mean losses and gradient global norms, taken
AFTER the all-reduce so that every replica sees the same values and takes
the same branch. The update (``apply_fn``) runs only when all of them are
finite and no earlier step failed; otherwise nothing moves (weights,
optimizer slots and ``iterations``, step counters) and the guard records the
learner step that failed and which quantities were non-finite. Once tripped
the guard skips every later step, also the rest of a multi-step
``tf.function`` call, so the weights stay exactly those of the last finite
step. The learner's ``step()`` then calls ``raise_if_tripped``, which raises
a one-line ``FloatingPointError``.

Why a ``merge_call`` and not a ``tf.cond`` in the step itself: under
``MirroredStrategy`` an optimizer update or a mirrored-variable increment
issues a ``merge_call``, which TF refuses inside a ``tf.cond`` branch of the
replica function. The guard therefore makes one ``merge_call`` and runs the
``tf.cond`` in cross-replica context, where ``apply_fn`` updates every copy
of each variable (``apply_gradients_cross_replica`` for Keras optimizers).
Multiplying the gradients by a 0/1 mask is not an option: Adam's moments and
step count would still move.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import tensorflow as tf


class NonFiniteGuard:
    """Applies a learner's update only when every watched value is finite.

    Create it under the replicator's scope. Its two variables are not meant
    for checkpoints (a tripped guard stops the run).

    Args:
      names: one name per watched value, in the order ``apply_if_finite``
        gets them, e.g. ``("critic loss", "policy loss", "critic gradient")``.

    Attributes:
      failed_step: int64 variable, the learner step (1-based: the step that
        would have made the counter reach it) of the first non-finite value,
        or -1.
      failed_mask: int64 variable, bit i set when ``names[i]`` was non-finite
        at that step.
    """

    def __init__(self, names: Sequence[str]):
        if not names or len(names) > 62:
            raise ValueError(f"NonFiniteGuard watches 1 to 62 values (got {len(names)})")
        self.names = tuple(names)
        kwargs = dict(dtype=tf.int64, trainable=False,
                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.failed_step = tf.Variable(-1, name="nonfinite_step", **kwargs)
        self.failed_mask = tf.Variable(0, name="nonfinite_mask", **kwargs)
        self._bits = tf.constant([1 << i for i in range(len(self.names))], tf.int64)

    # ------------------------------------------------------------ in the step
    def apply_if_finite(self, values: Sequence[tf.Tensor], step_counter: tf.Variable,
                        apply_fn: Callable[..., Any], *args: Any) -> tf.Tensor:
        """Runs ``apply_fn(strategy, *args)`` only if every value is finite; returns whether it ran.

        Call it in replica context (inside the step), once per step.

        Args:
          values: scalars, one per name, equal on every replica (e.g. after
            an all-reduce).
          step_counter: the learner's step variable (read, not changed: the
            increment belongs in ``apply_fn``).
          apply_fn: the update, called in CROSS-replica context inside a
            ``tf.cond``: ``apply_fn(strategy, *args)`` where each tensor of
            ``args`` arrives as a per-replica value (``strategy.extended.update``
            and ``apply_gradients_cross_replica`` take those as they are).
            Its return value is ignored.
          *args: tensors (nests of them) for ``apply_fn``, passed per replica.

        Returns:
          A scalar bool tensor, the same on every replica: True if applied.
        """
        # Only these lines are AutoGraph's to convert (when the caller's code is): the guard's own
        # graph code below holds no Python control flow on tensors, and converting its nested
        # functions would slow every learner's first trace. ``apply_fn`` is the caller's code, so
        # it is converted exactly when the caller's is.
        apply_fn = tf.__internal__.autograph.tf_convert(
            apply_fn, tf.__internal__.autograph.control_status_ctx(), convert_by_default=False)
        return self._apply_if_finite(values, step_counter, apply_fn, *args)

    @tf.autograph.experimental.do_not_convert
    def _apply_if_finite(self, values: Sequence[tf.Tensor], step_counter: tf.Variable,
                         apply_fn: Callable[..., Any], *args: Any) -> tf.Tensor:
        if len(values) != len(self.names):
            raise ValueError(f"expected {len(self.names)} values ({', '.join(self.names)}), "
                             f"got {len(values)}")
        checks = tf.stack([tf.reshape(tf.cast(v, tf.float32), []) for v in values])

        def merge_fn(strategy, checks, *args):
            # Every replica holds the same values (post all-reduce): use the first.
            checks = strategy.experimental_local_results(checks)[0]
            finite = tf.math.is_finite(checks)
            failed_step = self.failed_step.read_value()
            healthy = tf.less(failed_step, 0)

            def apply():
                apply_fn(strategy, *args)
                return tf.constant(True)

            def skip():
                # Record only the first failure; later skipped steps leave it.
                mask = tf.reduce_sum(tf.where(finite, tf.zeros_like(self._bits), self._bits))
                self.failed_step.assign(tf.where(healthy, step_counter.read_value() + 1, failed_step))
                self.failed_mask.assign(tf.where(healthy, mask, self.failed_mask.read_value()))
                return tf.constant(False)

            return tf.cond(tf.logical_and(tf.reduce_all(finite), healthy), apply, skip)

        return tf.distribute.get_replica_context().merge_call(merge_fn, args=(checks,) + tuple(args))

    # ------------------------------------------------------------- after a call
    @property
    def tripped(self) -> bool:
        """True once a step was skipped for a non-finite value."""
        return int(self.failed_step.numpy()) >= 0

    def raise_if_tripped(self, learner: str, fixes: Mapping[str, str]) -> None:
        """Raises a one-line FloatingPointError if a step was skipped.

        Args:
          learner: what to call the learner in the message, e.g. "D4PG".
          fixes: name -> what to change (e.g. "lower --critic-learning-rate");
            the message joins those of the non-finite values, then adds
            "check the rewards" advice from ``fixes.get("*")`` if given.
        """
        step = int(self.failed_step.numpy())
        if step < 0:
            return
        mask = int(self.failed_mask.numpy())
        bad = [name for i, name in enumerate(self.names) if mask >> i & 1] or ["value"]
        advice = []
        for name in bad:
            fix = fixes.get(name)
            if fix and fix not in advice:
                advice.append(fix)
        if fixes.get("*"):
            advice.append(fixes["*"])
        raise FloatingPointError(
            f"{learner}: non-finite {' and '.join(bad)} at learner step {step}; the update was not "
            f"applied, so the weights are those of step {step - 1}; "
            f"{' or '.join(advice) if advice else 'check the inputs'}")


def first_local(strategy: tf.distribute.Strategy, value: Any) -> Any:
    """In cross-replica context: the first local replica's tensor of a per-replica ``value``."""
    return strategy.experimental_local_results(value)[0]
