"""IMPALA's loss: V-trace targets and the shared policy-gradient pieces, combined.

The pieces live in ``rlplat.losses`` (``vtrace`` and ``policy_gradient``),
shared with any other actor-critic agent; this module only weighs them as
Espeholt et al. 2018 (Sec. 4.2) do::

  total = policy_gradient_loss + baseline_cost * baseline_loss
          + entropy_cost * entropy_loss

where each part is the MEAN over real steps (not the sum over T x B used by the
original implementation: with the mean, learning rates and costs do not depend
on the unroll length or the batch size), ``baseline_loss`` is
``0.5 * (vs - V(x_s))^2`` and ``entropy_loss`` is ``-entropy`` (a bonus).
Defaults: ``baseline_cost = 0.5``, ``entropy_cost = 0.01``.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import tensorflow as tf

from rlplat.losses import policy_gradient as pg_losses
from rlplat.losses.vtrace import vtrace


def _f32(x) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def impala_loss(
    log_pi_tm1,
    entropy_tm1,
    behaviour_log_pi_tm1,
    v_tm1,
    v_t,
    r_t,
    discount_t,
    mask_t=None,
    episode_end_t=None,
    *,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.01,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_c_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
    """The IMPALA loss on one batch of unrolls (scalar, mean over real steps).

    Args:
      log_pi_tm1: ``log pi(a_s|x_s)`` under the policy being trained, [T, B]
        (connected to its parameters).
      entropy_tm1: entropy of that policy at ``x_s``, [T, B] (connected).
      behaviour_log_pi_tm1: ``log mu(a_s|x_s)`` recorded by the actor, [T, B].
      v_tm1: ``V(x_s)``, [T, B] (connected: the baseline is trained here).
      v_t: successor values, [T, B]; see ``vtrace`` for episode ends.
      r_t: rewards, [T, B].
      discount_t: ``gamma * env_discount``, [T, B].
      mask_t: optional 1/0 [T, B] for padded steps.
      episode_end_t: optional 1/0 [T, B], contiguous layouts only (see vtrace).
      baseline_cost: weight of the baseline loss.
      entropy_cost: weight of the entropy bonus (>= 0).
      clip_rho_threshold: V-trace rho_bar.
      clip_c_threshold: V-trace c_bar.
      clip_pg_rho_threshold: clip of the policy-gradient importance weight.

    Returns:
      ``(total, parts)``: parts has the unweighted means
      ``policy_gradient_loss``, ``baseline_loss``, ``entropy_loss`` (= -mean
      entropy), and diagnostics ``mean_vs`` and ``mean_rho``.
    """
    if baseline_cost < 0 or entropy_cost < 0:
        raise ValueError(
            f"baseline_cost={baseline_cost} and entropy_cost={entropy_cost} must be >= 0"
        )
    log_pi_tm1 = _f32(log_pi_tm1)
    # Targets are constants: no gradient through the ratios or the values they use.
    log_rho = tf.stop_gradient(log_pi_tm1 - _f32(behaviour_log_pi_tm1))
    returns = vtrace(
        tf.stop_gradient(_f32(v_tm1)),
        tf.stop_gradient(_f32(v_t)),
        r_t,
        discount_t,
        log_rho,
        mask_t=mask_t,
        episode_end_t=episode_end_t,
        clip_rho_threshold=clip_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
    )
    pg = pg_losses.masked_mean(pg_losses.policy_gradient_loss(log_pi_tm1, returns.pg_advantages, mask_t), mask_t)
    bl = pg_losses.masked_mean(pg_losses.baseline_loss(returns.vs, v_tm1, mask_t), mask_t)
    ent = pg_losses.masked_mean(pg_losses.entropy_loss(entropy_tm1, mask_t), mask_t)
    total = pg + baseline_cost * bl + entropy_cost * ent
    parts = {
        "policy_gradient_loss": pg,
        "baseline_loss": bl,
        "entropy_loss": ent,
        "mean_vs": pg_losses.masked_mean(returns.vs, mask_t),
        "mean_rho": pg_losses.masked_mean(tf.exp(pg_losses.apply_mask(log_rho, mask_t)), mask_t),
    }
    return total, parts
