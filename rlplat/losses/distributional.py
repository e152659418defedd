"""Distributional (categorical) value losses, as in C51 and D4PG.

Pure TensorFlow, no variables. ``_tm1`` is the transition's first step
(s_{t-1}, a_{t-1}); ``_t`` is the bootstrap step n environment steps later.
B is the batch, N the number of atoms of the critic's support. Everything is
computed in float32; every input is cast to float32.
"""

from __future__ import annotations


import tensorflow as tf

# TensorFlow ops only, no Python control flow on tensors: AutoGraph would rewrite these
# functions for nothing, on every learner's first trace (docs/measurements.md).
_NOT_CONVERTED = tf.autograph.experimental.do_not_convert


def _f32(x) -> tf.Tensor:
    return tf.cast(x, tf.float32)


@_NOT_CONVERTED
def categorical_l2_project(z_p, probs, z_q) -> tf.Tensor:
    """Projects a categorical distribution onto a fixed support (Cramer/L2).

    Each source atom z (first clipped to [z_q[0], z_q[-1]]) gives its mass to
    the two neighbouring target atoms in proportion to closeness:
    atom j receives ``max(0, 1 - |z - z_q[j]| / delta)``, delta being the
    spacing on the side of z_q[j] where z lies. This is C51's projection
    (Bellemare et al. 2017, Alg. 1) written so that a source atom exactly on a
    target atom (floor == ceil) keeps all its mass there, and it also works
    for non-uniform (strictly increasing) supports.

    Args:
      z_p: source support, [B, N] (per-example) or [N] (shared).
      probs: source probabilities, [B, N]; rows should sum to 1.
      z_q: target support, [M], strictly increasing, M >= 2.
        v_min = z_q[0], v_max = z_q[-1].

    Returns:
      Projected probabilities [B, M]; each row keeps the mass of its input.
    """
    z_p, probs, z_q = _f32(z_p), _f32(probs), _f32(z_q)
    if z_q.shape.rank != 1:
        raise ValueError(f"z_q must be rank 1 [M] (got shape {z_q.shape})")
    if z_q.shape[0] is not None and z_q.shape[0] < 2:
        raise ValueError(f"z_q needs at least 2 atoms (got {z_q.shape[0]})")
    # Clip first: mass beyond the support piles onto the end atoms.
    z = tf.clip_by_value(z_p, z_q[0], z_q[-1])
    z = tf.broadcast_to(z, tf.shape(probs))
    spacing = z_q[1:] - z_q[:-1]  # [M-1]
    # Spacing to the right / left neighbour of each target atom. The end atoms
    # lack one neighbour; after clipping no z falls on that side, so any
    # finite positive filler is fine (reuse the nearest spacing).
    right = tf.concat([spacing, spacing[-1:]], axis=0)  # [M]
    left = tf.concat([spacing[:1], spacing], axis=0)  # [M]
    offset = z[..., :, None] - z_q  # [B, N, M]
    delta = tf.where(offset >= 0.0, right, left)
    # Exactly on an atom: offset 0 -> weight 1 there; its neighbours see
    # |offset| == delta bit-for-bit -> weight 0, so no mass leaks.
    weight = tf.clip_by_value(1.0 - tf.abs(offset) / delta, 0.0, 1.0)
    return tf.reduce_sum(probs[..., :, None] * weight, axis=-2)  # [B, M]


@_NOT_CONVERTED
def categorical_td_loss(q_logits_tm1, r_t, d_t, target_q_logits_t, atoms) -> tf.Tensor:
    """Distributional n-step TD loss (cross-entropy to the projected target).

    Target distribution: support ``r_t + d_t * atoms`` with probabilities
    ``softmax(target_q_logits_t)``, projected back onto ``atoms``; gradients
    never flow into the target (stop_gradient).

    Args:
      q_logits_tm1: online critic logits at (s_tm1, a_tm1), [B, N].
      r_t: n-step discounted reward sum, sum_{k<n} gamma^k r_{t-n+k+1}, [B].
      d_t: bootstrap discount, already combined by the caller:
        gamma^n times the product of the environment's per-step discounts
        over the n steps (0 at a terminal), [B].
      target_q_logits_t: target critic logits at (s_t, pi_target(s_t)), [B, N].
      atoms: the critic's support, [N].

    Returns:
      Per-example cross-entropy, [B]. Average it (or weight it) yourself.
    """
    q_logits_tm1, r_t, d_t = _f32(q_logits_tm1), _f32(r_t), _f32(d_t)
    target_q_logits_t, atoms = _f32(target_q_logits_t), _f32(atoms)
    target_z = r_t[:, None] + d_t[:, None] * atoms[None, :]  # [B, N]
    target_p = tf.nn.softmax(target_q_logits_t, axis=-1)  # [B, N]
    projected = tf.stop_gradient(categorical_l2_project(target_z, target_p, atoms))
    return tf.nn.softmax_cross_entropy_with_logits(labels=projected, logits=q_logits_tm1)


@_NOT_CONVERTED
def expected_q(q_logits, atoms) -> tf.Tensor:
    """Mean of the categorical distribution: logits [B, N], atoms [N] -> [B]."""
    q_logits, atoms = _f32(q_logits), _f32(atoms)
    return tf.reduce_sum(tf.nn.softmax(q_logits, axis=-1) * atoms, axis=-1)
