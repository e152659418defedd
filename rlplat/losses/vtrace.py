"""V-trace off-policy targets (Espeholt et al. 2018, IMPALA, Sec. 4.1, Eq. 1).

Pure TensorFlow, no variables. Shapes are time-major, ``[T, B]``: row ``s`` is
the transition ``x_s --a_s--> x_{s+1}``. Suffix ``_tm1`` names what belongs to
the transition's first state (``V(x_s)``, ``log rho_s``), ``_t`` what it leads
to (its reward ``r_s``, ``V(x_{s+1})``, its discount). The recursion (Remark 1)::

  delta_s = rho_s * (r_s + discount_s * V(x_{s+1}) - V(x_s))
  v_s - V(x_s) = delta_s + discount_s * c_s * (v_{s+1} - V(x_{s+1}))
  rho_s = min(rho_bar, pi/mu)(a_s|x_s),  c_s = lambda * min(c_bar, pi/mu)(a_s|x_s)

with ``v_T - V(x_T) = 0`` (the last row bootstraps from ``v_t[T-1]`` alone), and
the policy-gradient advantage
``rho_pg_s * (r_s + discount_s * v_{s+1} - V(x_s))``.

Episode boundaries. dm_env marks TERMINATION with discount 0 and TRUNCATION
(time limit) with a last step whose discount is > 0. The caller passes
``discount_t = gamma * env_discount``, so

* termination of transition s: ``discount_t[s] = 0``: no bootstrap, and since
  the trace term is multiplied by the discount nothing after s reaches
  ``vs[s]``;
* truncation of transition s: ``discount_t[s] = gamma`` and ``v_t[s]`` MUST be
  ``V(final observation of that episode)`` (never the value of the next
  episode's first state); the trace must also stop after s, which the caller
  says in one of two ways:

  - ``mask_t[s + 1] = 0`` (padded layout, what ``SequenceAdder`` writes: the
    episode's final observation sits in step s+1 with mask 0, then padding).
    Padded rows get ``vs = v_tm1``, ``pg_advantages = 0`` and contribute
    nothing to earlier rows, whatever their inputs are;
  - ``episode_end_t[s] = 1`` (contiguous layout: row s+1 already belongs to
    the next episode). Then ``v_{s+1}`` in both the trace and the
    policy-gradient target is ``v_t[s]``; the next episode's rows cannot
    change ``vs[:s+1]``.

Only ``v_t`` is used as the successor value, so in an unbroken unroll the
caller passes ``v_t = values[1:]`` and ``v_tm1 = values[:-1]`` of the T+1
state values; ``v_t`` may differ from ``v_tm1[s+1]`` only at episode ends.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import tensorflow as tf

# TensorFlow ops only, no Python control flow on tensors: AutoGraph would rewrite these
# functions for nothing, on every learner's first trace (docs/measurements.md).
_NOT_CONVERTED = tf.autograph.experimental.do_not_convert


class VTraceReturns(NamedTuple):
    """V-trace outputs, both ``[T, B]`` and wrapped in ``stop_gradient``.

    Attributes:
      vs: targets for ``V(x_s)`` (the baseline), aligned with ``v_tm1``.
      pg_advantages: ``rho_pg_s * (r_s + discount_s * v_{s+1} - V(x_s))``, the
        weight of ``grad log pi(a_s | x_s)``; 0 on masked rows.
    """

    vs: tf.Tensor
    pg_advantages: tf.Tensor


def _f32(x) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def _clip(rho: tf.Tensor, threshold: Optional[float], name: str) -> tf.Tensor:
    if threshold is None:  # The paper allows unclipped rho (rho_bar = inf).
        return rho
    if threshold <= 0:
        raise ValueError(f"{name}={threshold} must be > 0, or None to disable clipping")
    return tf.minimum(_f32(threshold), rho)


@_NOT_CONVERTED
def vtrace(
    v_tm1,
    v_t,
    r_t,
    discount_t,
    log_rho_tm1,
    *,
    mask_t=None,
    episode_end_t=None,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_c_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages, time-major.

    Works eagerly and under ``tf.function`` (T and B may be unknown until run
    time). See the module docstring for the episode-boundary convention.

    Args:
      v_tm1: ``V(x_s)`` under the current value function, [T, B].
      v_t: ``V(x_{s+1})``, the successor value of each transition, [T, B]; at a
        truncated episode end, the value of that episode's final observation.
      r_t: reward of the transition, [T, B].
      discount_t: ``gamma * env_discount`` of the transition (0 at
        termination, gamma at truncation), [T, B].
      log_rho_tm1: ``log pi(a_s|x_s) - log mu(a_s|x_s)`` (target minus
        behaviour policy), [T, B]. Ignored on masked rows.
      mask_t: optional 1/0 [T, B]; 0 marks padding (no real transition). A
        real row followed by a masked one is an episode end.
      episode_end_t: optional 1/0 [T, B]; 1 where the transition is the last of
        its episode and the NEXT row belongs to another episode.
      clip_rho_threshold: rho_bar of ``delta_s``; None disables clipping.
      clip_c_threshold: c_bar of the trace coefficients; None disables.
      clip_pg_rho_threshold: clip of the policy-gradient rho; None disables.
      lambda_: extra trace decay, c_s = lambda * min(c_bar, rho_s) (as in
        Retrace(lambda)); 1.0 is plain V-trace.

    Returns:
      ``VTraceReturns(vs, pg_advantages)``, each [T, B], gradient-stopped.
    """
    v_tm1, v_t, r_t, discount_t = _f32(v_tm1), _f32(v_t), _f32(r_t), _f32(discount_t)
    log_rho_tm1 = _f32(log_rho_tm1)
    if v_tm1.shape.rank is not None and v_tm1.shape.rank < 1:
        raise ValueError(f"vtrace inputs must be time-major [T, ...] (got v_tm1 {v_tm1.shape})")
    for name, x in (("v_t", v_t), ("r_t", r_t), ("discount_t", discount_t),
                    ("log_rho_tm1", log_rho_tm1)):
        if not x.shape.is_compatible_with(v_tm1.shape):
            raise ValueError(f"vtrace: {name} has shape {x.shape}, v_tm1 has {v_tm1.shape}")

    real = tf.ones_like(v_tm1, tf.bool) if mask_t is None else _f32(mask_t) > 0

    def masked(x):
        # tf.where, not x * mask: a padded row's inputs are garbage (log pi of a
        # zero action may overflow exp, a value may be inf) and inf * 0 is NaN.
        return tf.where(real, x, tf.zeros_like(x))

    rho = tf.exp(masked(log_rho_tm1))
    clipped_rho = _clip(rho, clip_rho_threshold, "clip_rho_threshold")
    cs = _f32(lambda_) * _clip(rho, clip_c_threshold, "clip_c_threshold")
    pg_rho = _clip(rho, clip_pg_rho_threshold, "clip_pg_rho_threshold")
    # 1 where the correction of row s+1 may flow into row s.
    carry = tf.ones_like(v_tm1) if episode_end_t is None else 1.0 - _f32(episode_end_t)

    deltas = masked(clipped_rho * (r_t + discount_t * v_t - v_tm1))
    trace = masked(discount_t * cs * carry)

    def step(acc, elems):
        # acc = v_{s+1} - V(x_{s+1}); a masked row yields 0 (both terms are 0).
        delta, coef = elems
        return delta + coef * acc

    # Reverse scan: corrections[s] = v_s - V(x_s), built from the last row back.
    corrections = tf.scan(step, (deltas, trace), initializer=tf.zeros_like(v_tm1[0]),
                          reverse=True)
    vs = v_tm1 + corrections
    # v_{s+1} for the policy-gradient target: the successor value plus its
    # correction, except past an episode end or the unroll's last row.
    next_corrections = tf.concat([corrections[1:], tf.zeros_like(corrections[:1])], axis=0)
    vs_t = v_t + carry * next_corrections
    pg_advantages = masked(pg_rho * (r_t + discount_t * vs_t - v_tm1))
    return VTraceReturns(vs=tf.stop_gradient(vs), pg_advantages=tf.stop_gradient(pg_advantages))
