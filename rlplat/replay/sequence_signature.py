"""Signature of fixed-length unrolls (IMPALA-style sequences), from dm_env specs.

One item is ``unroll_length + 1`` steps: T transitions plus the bootstrap
step (the next unroll's first step). Field ``k`` of every step describes the
transition OUT of observation ``k`` (see ``SequenceAdder`` for the layout and
the episode-end convention).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tree

from rlplat.replay import reverb_client
from rlplat.replay.signature import REPLAY_DTYPE

# Policy versions are learner step counters: exact integers, never float32.
POLICY_VERSION_DTYPE = reverb_client.dtypes.int64


class SequenceStep(NamedTuple):
    """One step of an unroll; stacked as ``[T + 1, ...]`` in a replay item.

    Attributes:
      observation: o_k (zeros on padding; on the step after an episode's last
        transition: that episode's final observation).
      action: a_k, taken at o_k (float32, discrete actions included).
      reward: reward of the transition o_k -> o_{k+1}.
      discount: env discount of that transition: 0 = termination, 1 (or the
        env's value) otherwise, truncation included.
      extras: nest of the behaviour policy's outputs at o_k (e.g. logits, or
        mean and log_std).
      behaviour_log_prob: log mu(a_k | o_k) under the behaviour policy.
      policy_version: version of the weights that chose a_k (int64).
      mask: 1.0 if a_k was really taken (a real transition), 0.0 otherwise
        (the final-observation step and the padding after it).
    """

    observation: Any
    action: Any
    reward: Any
    discount: Any
    extras: Any
    behaviour_log_prob: Any
    policy_version: Any
    mask: Any


def _seq_spec(spec: Any, steps: int, dtype: Any = REPLAY_DTYPE) -> reverb_client.TensorSpec:
    return reverb_client.TensorSpec(shape=(steps,) + tuple(spec.shape), dtype=dtype)


def sequence_signature(
    obs_spec: Any, action_spec: Any, extras_spec: Any, unroll_length: int
) -> SequenceStep:
    """Returns the table signature of unrolls of ``unroll_length`` transitions.

    Args:
      obs_spec: dm_env spec (or nest of specs; anything with ``.shape``) of
        observations.
      action_spec: dm_env spec (or nest) of actions.
      extras_spec: nest of specs of the behaviour policy's outputs per step,
        e.g. ``{"logits": Array((A,))}`` or ``{"mean": ..., "log_std": ...}``.
        Use ``()`` for none.
      unroll_length: T >= 1; items hold T + 1 steps.

    Returns:
      A ``SequenceStep`` of ``tf.TensorSpec`` with leading dimension T + 1; all
      float32 except ``policy_version`` (int64).
    """
    if unroll_length < 1:
        raise ValueError(f"unroll_length={unroll_length} must be >= 1")
    n = unroll_length + 1
    scalar = reverb_client.TensorSpec((), REPLAY_DTYPE)
    return SequenceStep(
        observation=tree.map_structure(lambda s: _seq_spec(s, n), obs_spec),
        action=tree.map_structure(lambda s: _seq_spec(s, n), action_spec),
        reward=_seq_spec(scalar, n),
        discount=_seq_spec(scalar, n),
        extras=tree.map_structure(lambda s: _seq_spec(s, n), extras_spec),
        behaviour_log_prob=_seq_spec(scalar, n),
        policy_version=_seq_spec(scalar, n, POLICY_VERSION_DTYPE),
        mask=_seq_spec(scalar, n),
    )


def as_sequence_step(signature: Any) -> Any:
    """Re-types a signature (or sample) decoded by Reverb as ``SequenceStep``.

    Reverb decodes namedtuples into look-alike classes; converting keeps field
    access and ``isinstance`` checks uniform across processes.
    """
    if getattr(signature, "_fields", None) == SequenceStep._fields:
        return SequenceStep(*signature)
    return signature


def step_signature(signature: Any) -> Any:
    """The per-step specs of a sequence signature (leading T + 1 dropped)."""
    return tree.map_structure(
        lambda s: reverb_client.TensorSpec(tuple(s.shape)[1:], s.dtype), as_sequence_step(signature)
    )


def unroll_length_of(signature: Any) -> int:
    """T of a sequence signature (its items hold T + 1 steps)."""
    return int(tree.flatten(signature)[0].shape[0]) - 1
