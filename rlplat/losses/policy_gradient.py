"""Policy-gradient loss pieces: log-densities, entropies and masked losses.

Pure TensorFlow, no variables. Shapes are time-major ``[T, B]`` (``[T, B, A]``
for logits, ``[T, B, D]`` for Gaussian parameters and continuous actions);
row s is the transition from ``x_s`` (suffix ``_tm1``), as in
``rlplat.losses.vtrace``. ``mask_t`` is 1 for real transitions and 0 for
padding (``SequenceAdder``'s ``mask[:-1]``); the per-step losses return exact
zeros on padded rows, so padding never reaches a gradient. Every loss is the
MEAN over real steps, so learning rates and costs do not depend on the unroll
length or the batch size.
"""

from __future__ import annotations

import math

import tensorflow as tf

# TensorFlow ops only, no Python control flow on tensors: AutoGraph would rewrite these
# functions for nothing, on every learner's first trace (docs/measurements.md).
_NOT_CONVERTED = tf.autograph.experimental.do_not_convert


_LOG_2PI = math.log(2.0 * math.pi)


def _f32(x) -> tf.Tensor:
    return tf.cast(x, tf.float32)


@_NOT_CONVERTED
def apply_mask(x: tf.Tensor, mask_t) -> tf.Tensor:
    """``x`` with exact zeros on padded rows (``mask_t`` 0); ``x`` itself when ``mask_t`` is None."""
    # tf.where (not x * mask) so a non-finite value on a padded row (e.g. a
    # log-density of a zero action) cannot turn into NaN in the forward pass.
    if mask_t is None:
        return x
    return tf.where(_f32(mask_t) > 0, x, tf.zeros_like(x))


@_NOT_CONVERTED
def masked_mean(x, mask_t=None) -> tf.Tensor:
    """Mean of ``x`` [T, B] over real steps (0 if there are none)."""
    x = _f32(x)
    if mask_t is None:
        return tf.reduce_mean(x)
    mask = _f32(mask_t)
    return tf.reduce_sum(apply_mask(x, mask)) / tf.maximum(tf.reduce_sum(mask), 1.0)


# --- Policy distributions ------------------------------------------------------


@_NOT_CONVERTED
def categorical_log_prob(logits_tm1, a_tm1) -> tf.Tensor:
    """``log softmax(logits)[a]``: logits [T, B, A], actions [T, B] -> [T, B].

    Actions may be stored as floats (replay is float32); they are cast to int.
    """
    labels = tf.cast(a_tm1, tf.int32)
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=_f32(logits_tm1))


@_NOT_CONVERTED
def categorical_entropy(logits_tm1) -> tf.Tensor:
    """Entropy ``-sum_a p log p`` of softmax(logits): [T, B, A] -> [T, B]."""
    log_p = tf.nn.log_softmax(_f32(logits_tm1), axis=-1)
    return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)


@_NOT_CONVERTED
def gaussian_log_prob(mean_tm1, log_std_tm1, a_tm1) -> tf.Tensor:
    """Diagonal Gaussian log-density, summed over action dims: [T, B, D] -> [T, B].

    ``a_tm1`` must be the action the density was evaluated at by the actor
    (e.g. the sample BEFORE any clipping to the action bounds), or the
    importance ratios are wrong.
    """
    mean, log_std, a = _f32(mean_tm1), _f32(log_std_tm1), _f32(a_tm1)
    z = (a - mean) * tf.exp(-log_std)
    return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)


@_NOT_CONVERTED
def gaussian_entropy(log_std_tm1) -> tf.Tensor:
    """Entropy of a diagonal Gaussian, ``sum_d log_std + 0.5 log(2 pi e)``: [T, B, D] -> [T, B]."""
    return tf.reduce_sum(_f32(log_std_tm1) + 0.5 * (_LOG_2PI + 1.0), axis=-1)


@_NOT_CONVERTED
def tanh_log_det_jacobian(u_tm1) -> tf.Tensor:
    """``sum_d log(1 - tanh(u)^2)``, stably: [T, B, D] -> [T, B].

    The log-density of ``a = tanh(u)`` is ``log N(u) - tanh_log_det_jacobian(u)``.
    """
    u = _f32(u_tm1)
    return tf.reduce_sum(2.0 * (math.log(2.0) - u - tf.nn.softplus(-2.0 * u)), axis=-1)


@_NOT_CONVERTED
def tanh_gaussian_log_prob(mean_tm1, log_std_tm1, u_tm1) -> tf.Tensor:
    """Log-density of ``a = tanh(u)``, ``u ~ N(mean, std)``, at the PRE-squash sample ``u``."""
    return gaussian_log_prob(mean_tm1, log_std_tm1, u_tm1) - tanh_log_det_jacobian(u_tm1)


@_NOT_CONVERTED
def tanh_gaussian_entropy(mean_tm1, log_std_tm1, noise_tm1) -> tf.Tensor:
    """One-sample estimate of the entropy of ``tanh(N(mean, std))``: [T, B, D] -> [T, B].

    ``H = H(N) + E[sum log(1 - tanh(u)^2)]`` with ``u = mean + std * noise``
    (reparameterised: the gradient reaches mean and log-std). Unlike the
    Gaussian's own entropy it is bounded, and it falls when the mean or the
    std push the mass into tanh's flat tails (actions stuck at the bounds).
    """
    mean, log_std = _f32(mean_tm1), _f32(log_std_tm1)
    u = mean + tf.exp(log_std) * _f32(noise_tm1)
    return gaussian_entropy(log_std) + tanh_log_det_jacobian(u)


# --- Per-step losses [T, B] ----------------------------------------------------


@_NOT_CONVERTED
def policy_gradient_loss(log_pi_tm1, pg_advantages, mask_t=None) -> tf.Tensor:
    """``-log pi(a_s|x_s) * pg_advantage_s`` per step, [T, B].

    The advantage is a constant (stop_gradient), so the gradient is the
    importance-weighted policy gradient; descending it raises ``log pi`` where
    the advantage is positive.
    """
    loss = -_f32(log_pi_tm1) * tf.stop_gradient(_f32(pg_advantages))
    return apply_mask(loss, mask_t)


@_NOT_CONVERTED
def baseline_loss(vs, v_tm1, mask_t=None) -> tf.Tensor:
    """``0.5 * (vs - V(x_s))^2`` per step, [T, B]; gradients reach ``v_tm1`` only."""
    loss = 0.5 * tf.square(tf.stop_gradient(_f32(vs)) - _f32(v_tm1))
    return apply_mask(loss, mask_t)


@_NOT_CONVERTED
def entropy_loss(entropy_tm1, mask_t=None) -> tf.Tensor:
    """``-entropy`` per step, [T, B]: minimising it is the entropy bonus."""
    return apply_mask(-_f32(entropy_tm1), mask_t)


# --- Combined ------------------------------------------------------------------
