"""Transitions packed into one float32 vector per replay item.

Reverb's cost per item grows with its number of columns: every column is its
own chunk with its own encoding, references and bookkeeping, on the writer and
again on the sampler. A flat transition (observation, action, reward,
discount, next_observation) is five or more small columns, so most of what an
actor pays per step is that per-column overhead, not the bytes. Packing the
fields into ONE float32 vector makes each item a single column, which more
than halves the CPU per item written and per batch sampled
(``bench/replay_packing.py``; the figures are in docs/measurements.md).

Replay already stores everything as float32 (``signature.REPLAY_DTYPE``), so
packing loses nothing; the layout is derived from the environment spec on both
sides, so the writer and the learner agree by construction.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, List, Sequence, Tuple

import numpy as np
import tree

from rlplat.replay import reverb_client
from rlplat.replay.signature import REPLAY_DTYPE, transition_signature
from rlplat.replay.types import Transition

if TYPE_CHECKING:
    import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class TransitionPacking:
    """The layout of a ``Transition`` flattened into one float32 vector.

    Fields are laid out in ``tree.flatten`` order of the transition signature
    (observation, action, reward, discount, next_observation; nested
    observations in sorted-key order), each raveled.

    Attributes:
      signature: The unpacked ``Transition`` of ``tf.TensorSpec``.
    """

    signature: Transition

    @classmethod
    def from_specs(cls, obs_spec: Any, action_spec: Any) -> "TransitionPacking":
        """The packing of ``transition_signature(obs_spec, action_spec)``."""
        return cls(transition_signature(obs_spec, action_spec))

    @property
    def shapes(self) -> List[Tuple[int, ...]]:
        """Shapes of the flattened fields, in packing order."""
        return [tuple(s.shape) for s in tree.flatten(self.signature)]

    @property
    def sizes(self) -> List[int]:
        """Number of floats each flattened field takes."""
        return [int(math.prod(shape)) for shape in self.shapes]

    @property
    def size(self) -> int:
        """Length of the packed vector."""
        return sum(self.sizes)

    @property
    def table_signature(self) -> tf.TensorSpec:
        """The Reverb table signature: one ``[size]`` float32 column."""
        return reverb_client.TensorSpec((self.size,), REPLAY_DTYPE)

    def pack(self, flat: Sequence[Any]) -> np.ndarray:
        """Packs the flattened fields of one transition (float32 NumPy)."""
        return np.concatenate([np.ravel(x) for x in flat]).astype(np.float32, copy=False)

    def unpack(self, packed: tf.Tensor) -> Transition:
        """Splits ``[..., size]`` tensors back into a ``Transition`` (in TF: the learner's input)."""
        import tensorflow as tf  # pylint: disable=g-import-not-at-top,redefined-outer-name  (actors pack only)

        packed = tf.convert_to_tensor(packed)
        outer = tf.shape(packed)[:-1]
        parts = tf.split(packed, self.sizes, axis=-1)
        fields = []
        for part, shape in zip(parts, self.shapes):
            target = tf.concat([outer, tf.constant(shape, tf.int32)], axis=0)
            field = tf.reshape(part, target)
            # Keep the static batch dimension that drop_remainder gave us.
            field.set_shape(packed.shape[:-1].concatenate(shape))
            fields.append(field)
        return tree.unflatten_as(self.signature, fields)

    def unpack_numpy(self, packed: np.ndarray) -> Transition:
        """``unpack`` in NumPy, for tests and for reading items by hand."""
        packed = np.asarray(packed)
        outer = packed.shape[:-1]
        bounds = np.cumsum(self.sizes)[:-1]
        parts = np.split(packed, bounds, axis=-1)
        fields = [part.reshape(outer + shape) for part, shape in zip(parts, self.shapes)]
        return tree.unflatten_as(self.signature, fields)

    def check_table(self, table_signature: Any, table: str) -> None:
        """One-line ValueError unless the server's table holds this packing."""
        flat = tree.flatten(table_signature) if table_signature is not None else []
        ok = (len(flat) == 1 and tuple(flat[0].shape) == (self.size,)
              and flat[0].dtype == REPLAY_DTYPE)
        if not ok:
            got = ", ".join(f"{list(s.shape)} {s.dtype.name}" for s in flat) or "none"
            raise ValueError(
                f"replay table {table!r} does not hold packed transitions of "
                f"{self.size} floats for this environment (its columns: {got}); "
                f"create it with TransitionPacking.table_signature of the same env spec"
            )
