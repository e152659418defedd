"""Optimizers shared by the learners (Keras 2, TF 2.15)."""

from __future__ import annotations

import tensorflow as tf

# TensorFlow ops only, no Python control flow on tensors: AutoGraph would rewrite these
# functions for nothing, on every learner's first trace (docs/measurements.md).
_NOT_CONVERTED = tf.autograph.experimental.do_not_convert


class FusedAdam(tf.keras.optimizers.Adam):  # pylint: disable=abstract-method
    """Keras 2 Adam whose dense update is TF's fused ``ResourceApplyAdam`` kernel.

    Same maths, slots and checkpoint layout as ``tf.keras.optimizers.Adam``
    (it is one), but one pass over memory per variable instead of ~11 eager
    element-wise ops: on CPU that is ~3.8 -> ~1 ms per D4PG step at the default
    sizes. Sparse gradients and AMSGrad fall back to the parent.
    """

    def update_step(self, gradient, variable):
        if isinstance(gradient, tf.IndexedSlices) or self.amsgrad:
            return super().update_step(gradient, variable)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        index = self._index_dict[self._var_key(variable)]
        # Inside `extended.update` the slots' `.handle` is this device's copy.
        return tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].handle,
            v=self._velocities[index].handle,
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(self.learning_rate, dtype), beta1=beta_1, beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype), grad=gradient)


@_NOT_CONVERTED
def apply_gradients_cross_replica(optimizer: tf.keras.optimizers.Optimizer,
                                  strategy: tf.distribute.Strategy, grads_and_vars) -> tf.Tensor:
    """``optimizer.apply_gradients(..., skip_gradients_aggregation=True)`` from cross-replica context.

    What Keras 2's ``apply_gradients`` runs inside its ``merge_call``: each
    variable's update on every device (per-replica gradients are taken as
    they are: all-reduce them first), then ``iterations += 1``. Usable where
    ``apply_gradients`` is not, e.g. in a ``tf.cond`` inside a ``merge_call``
    (``rlplat.utils.nonfinite``). The Keras features applied outside that
    function (learning-rate schedules, gradient clipping, weight decay, EMA)
    are refused rather than silently skipped.
    """
    if not isinstance(optimizer, tf.keras.optimizers.Optimizer) or not hasattr(
            optimizer, "_distributed_apply_gradients_fn"):
        raise TypeError(f"apply_gradients_cross_replica needs a Keras 2 optimizer "
                        f"(got {type(optimizer).__name__})")
    unsupported = [name for name in ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay")
                   if getattr(optimizer, name, None)]
    if getattr(optimizer, "use_ema", False):
        unsupported.append("use_ema")
    if isinstance(getattr(optimizer, "_learning_rate", None),
                  tf.keras.optimizers.schedules.LearningRateSchedule):
        unsupported.append("a learning-rate schedule")
    if unsupported:
        raise NotImplementedError(f"apply_gradients_cross_replica does not support {unsupported}; "
                                  "clip or decay in the step instead")
    return optimizer._distributed_apply_gradients_fn(  # pylint: disable=protected-access
        strategy, list(grads_and_vars))
