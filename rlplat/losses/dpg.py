"""Deterministic policy-gradient losses (Silver et al. 2014), as in DDPG and D4PG.

``dpg_policy_loss`` is -E[Q(s, pi(s))], with E[Q] the mean of the critic's
categorical distribution; its gradient with respect to the policy
parameters is the deterministic policy gradient -dQ/da * dpi/dtheta, flowing
through the critic into the action. The learner must apply it to the policy
variables only (the critic is trained by its own loss). ``dpg_dqda_loss`` is
the equivalent "target = stop_gradient(a + dQ/da)" form, which clips each
example's dQ/da by norm first (the D4PG learner's default); without clipping
both give the same policy gradient. Pure TensorFlow, no variables.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from rlplat.losses.distributional import expected_q

# TensorFlow ops only, no Python control flow on tensors: AutoGraph would rewrite these
# functions for nothing, on every learner's first trace (docs/measurements.md).
_NOT_CONVERTED = tf.autograph.experimental.do_not_convert


def _f32(x) -> tf.Tensor:
    return tf.cast(x, tf.float32)


@_NOT_CONVERTED
def dpg_policy_loss(q_logits, atoms) -> tf.Tensor:
    """Deterministic policy-gradient loss, -E[Q(s, pi(s))], per example [B].

    Args:
      q_logits: critic logits at (s, pi(s)), [B, N], computed with the action
        from the policy being trained so the gradient reaches its parameters.
      atoms: the critic's support, [N].

    Returns:
      -expected Q, [B]. Differentiate the batch mean with respect to the
      policy variables only.
    """
    return -expected_q(q_logits, atoms)


@_NOT_CONVERTED
def dpg_dqda_loss(dqda, actions, dqda_clip_norm: Optional[float] = None) -> tf.Tensor:
    """DPG loss from a precomputed action-gradient dQ/da, per example [B].

    loss = 0.5 * ||stop_gradient(a + g) - a||^2 with g = dQ/da, optionally
    rescaled so that ||g|| <= ``dqda_clip_norm`` for each example (the norm
    is over the action dimensions). Its gradient w.r.t. a is -g; chained
    through a = pi(s) it is the deterministic policy gradient. Unclipped it
    equals the gradient of ``dpg_policy_loss``; clipped, no single example's
    action-gradient can outweigh the rest of the batch.

    Args:
      dqda: dE[Q]/da for the batch, [B, A] (e.g. from a GradientTape on a).
      actions: the policy's actions pi(s), [B, A], connected to the policy.
      dqda_clip_norm: if set (> 0), each row of dqda is scaled down to this
        Euclidean norm when it is longer.

    Returns:
      Per-example loss, [B].
    """
    dqda, actions = _f32(dqda), _f32(actions)
    if dqda_clip_norm is not None:
        if dqda_clip_norm <= 0:
            raise ValueError(f"dqda_clip_norm must be > 0 (got {dqda_clip_norm}); "
                             "pass None to disable")
        dqda = tf.clip_by_norm(dqda, dqda_clip_norm, axes=[-1])
    target = tf.stop_gradient(actions + dqda)
    return 0.5 * tf.reduce_sum(tf.square(target - actions), axis=-1)
