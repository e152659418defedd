"""The digits classifier: an MLP with synchronized batch normalization.

``BatchNormalization(synchronized=True)`` computes the batch mean and variance
over the GLOBAL batch (an all-reduce across replicas inside the layer), so N
replicas at global batch B normalize exactly like one device at B. With
``synchronized=False`` each replica normalizes over its own per-replica
batch, and the trained weights depend on the replica count.

Under ``precision`` "bf16" the Dense layers are ``BF16Dense`` (their products
in bfloat16, the 10-logit output's in float32: narrower than
``MIN_BF16_WIDTH``); batch normalization and every variable stay float32.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from rlplat_agents.supervised import data
from rlplat.utils.bf16_dense import dense_class


def make_classifier(hidden_sizes: Sequence[int], synchronized_batch_norm: bool = True,
                    seed: int = 0, precision: str = "fp32") -> tf.keras.Model:
    """Dense -> BatchNorm -> ReLU blocks, then a linear layer of 10 logits.

    Build it under ``Replicator.scope()``. The model is built (its variables
    exist) on return, so checkpoints restore into it at once. Weight
    initialization is fixed by ``seed``; ``precision`` is a resolved one,
    fp32 or bf16 (the same variables either way).
    """
    dense = dense_class(precision)
    inputs = tf.keras.Input(shape=(data.NUM_FEATURES,), name="pixels")
    h = inputs
    for i, size in enumerate(hidden_sizes):
        # The bias is redundant before batch norm (its beta plays that role).
        h = dense(
            size, use_bias=False, name=f"dense_{i}",
            kernel_initializer=tf.keras.initializers.HeNormal(seed=seed + i))(h)
        h = tf.keras.layers.BatchNormalization(
            synchronized=synchronized_batch_norm, momentum=0.9, name=f"batch_norm_{i}")(h)
        h = tf.keras.layers.ReLU(name=f"relu_{i}")(h)
    logits = dense(
        data.NUM_CLASSES, name="logits",
        kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed + len(hidden_sizes)))(h)
    return tf.keras.Model(inputs, logits, name="digits_mlp")
