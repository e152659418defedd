"""Reverb table signatures derived from dm_env specs."""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np
import tree

from rlplat.replay import reverb_client
from rlplat.replay.types import Transition

# Everything in replay is float32: the learner consumes one dtype, discrete
# actions included (they are cast back to ints by the agent where needed), and
# a single dtype keeps the adder's per-step cast trivial.
REPLAY_DTYPE = reverb_client.dtypes.float32


def _float_spec(spec: Any) -> reverb_client.TensorSpec:
    return reverb_client.TensorSpec(shape=tuple(spec.shape), dtype=REPLAY_DTYPE)


def transition_signature(obs_spec: Any, action_spec: Any) -> Transition:
    """Returns the table signature of (n-step) transitions.

    Args:
      obs_spec: A dm_env spec (or nest of specs; anything with ``.shape``) for
        observations.
      action_spec: A dm_env spec (or nest of specs) for actions.

    Returns:
      A ``Transition`` of ``tf.TensorSpec`` (all float32). Reward and discount
      are scalars; observation and next_observation share ``obs_spec``'s shape.
    """
    obs = tree.map_structure(_float_spec, obs_spec)
    return Transition(
        observation=obs,
        action=tree.map_structure(_float_spec, action_spec),
        reward=reverb_client.TensorSpec((), REPLAY_DTYPE),
        discount=reverb_client.TensorSpec((), REPLAY_DTYPE),
        next_observation=tree.map_structure(lambda s: s, obs),
    )


def as_transition(signature: Any) -> Any:
    """Re-types a signature fetched from a server as our ``Transition``.

    Reverb decodes namedtuple signatures into a look-alike class created by
    TensorFlow's structure coder; converting keeps ``isinstance`` checks and
    field access uniform across processes.
    """
    fields = getattr(signature, "_fields", None)
    if fields == Transition._fields:
        return Transition(*signature)
    return signature


def _path_name(path: Tuple[Any, ...]) -> str:
    return "/".join(str(p) for p in path)


def check_against_signature(sample: Any, signature: Any, table: str) -> None:
    """Raises a one-line ValueError naming the first field that does not match.

    Args:
      sample: A nest of NumPy arrays (e.g. a ``Transition``) as it would be
        written.
      signature: The table signature (nest of ``tf.TensorSpec``).
      table: Table name, for the message.
    """
    want = [_path_name(p) for p, _ in tree.flatten_with_path(signature)]
    got = [_path_name(p) for p, _ in tree.flatten_with_path(sample)]
    if want != got:
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        raise ValueError(
            f"replay step does not match table {table!r}: missing fields {missing}, "
            f"unexpected fields {extra}; build the table from this env's specs"
        )
    for name, spec, value in zip(want, tree.flatten(signature), tree.flatten(sample)):
        shape, dtype = tuple(spec.shape), np.dtype(spec.dtype.as_numpy_dtype)
        if value.shape != shape or value.dtype != dtype:
            raise ValueError(
                f"replay field {name!r}: got shape {value.shape} {value.dtype}, "
                f"table {table!r} expects {shape} {dtype.name}"
            )
