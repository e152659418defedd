"""The digits data set and its input pipeline.

scikit-learn's ``load_digits`` (1,797 8x8 grey-scale images of the digits 0-9)
ships inside the scikit-learn wheel, so nothing is downloaded. The train /
held-out split is stratified and fixed by the seed; pixels are scaled to
[0, 1] and flattened to 64 float32 features.

The training stream is a pure function of ``(seed, position)``: epoch ``e`` is
a permutation of the training set drawn from the stateless seed
``(seed, e)``. So the global batch of step ``s`` is the same examples whatever
the number of replicas or workers, and a resumed run can start the stream at
step ``s`` (``start_step``) without replaying data or checkpointing iterator
state (which would tie a checkpoint to one replica count).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np
import tensorflow as tf

NUM_CLASSES = 10
NUM_FEATURES = 64
_PIXEL_MAX = 16.0  # load_digits pixels are integers in [0, 16]


@dataclasses.dataclass(frozen=True)
class Split:
    """Features ``x`` [N, 64] float32 in [0, 1] and labels ``y`` [N] int32."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)


@functools.lru_cache(maxsize=8)
def load_splits(seed: int, held_out_fraction: float = 0.2) -> "tuple[Split, Split]":
    """Returns ``(train, held_out)``: a stratified split fixed by ``seed``."""
    from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
    from sklearn.model_selection import train_test_split  # pylint: disable=g-import-not-at-top

    digits = load_digits()
    x = (digits.data / _PIXEL_MAX).astype(np.float32)
    y = digits.target.astype(np.int32)
    x_train, x_held, y_train, y_held = train_test_split(
        x, y, test_size=held_out_fraction, stratify=y, random_state=seed)
    for array in (x_train, x_held, y_train, y_held):
        array.setflags(write=False)  # cached and shared: keep it read-only
    return Split(x_train, y_train), Split(x_held, y_held)


def make_input_fn(global_batch_size: int, seed: int, start_step: int = 0,
                  held_out_fraction: float = 0.2
                  ) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """Returns ``input_fn(input_context)`` for ``Replicator.distribute``.

    The returned dataset yields PER-REPLICA batches ``(x, y)`` forever,
    starting with the data of global step ``start_step``. Consecutive
    per-replica batches make up one global batch, and with several input
    pipelines (workers) pipeline ``i`` keeps every ``num_input_pipelines``-th
    per-replica batch, so each global step sees the same examples whatever the
    topology.
    """
    if global_batch_size < 1:
        raise ValueError(f"global_batch_size must be >= 1 (got {global_batch_size})")
    if start_step < 0:
        raise ValueError(f"start_step must be >= 0 (got {start_step})")
    train, _ = load_splits(seed, held_out_fraction)

    def input_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica_batch_size = ctx.get_per_replica_batch_size(global_batch_size)
        x = tf.constant(train.x)
        y = tf.constant(train.y)
        num_examples = len(train)
        start = start_step * global_batch_size  # position in the example stream
        first_epoch, skip = divmod(start, num_examples)

        def epoch_indices(epoch: tf.Tensor) -> tf.data.Dataset:
            stateless_seed = tf.stack([tf.cast(seed, tf.int64), epoch])
            order = tf.argsort(tf.random.stateless_uniform([num_examples], stateless_seed))
            return tf.data.Dataset.from_tensor_slices(order)

        indices = (tf.data.Dataset.range(first_epoch, np.iinfo(np.int64).max)
                   .flat_map(epoch_indices)
                   .skip(skip)
                   .batch(per_replica_batch_size, drop_remainder=True))
        if ctx.num_input_pipelines > 1:
            indices = indices.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return (indices.map(lambda i: (tf.gather(x, i), tf.gather(y, i)))
                .prefetch(tf.data.AUTOTUNE))

    return input_fn
