"""The generator and the (spectrally normalised) discriminator: small MLPs on 8x8 digits.

``SpectralNormDense`` divides its kernel by an estimate of the kernel's
largest singular value, kept in ``u`` and refined by one power iteration per
training call (Miyato et al., 2018). The estimate ``u`` depends only on the
kernel, which is identical on every replica, so its update is the same
everywhere and the first replica's value is kept (``ONLY_FIRST_REPLICA``).

Under ``precision`` "bf16" (a resolved one: ``rlplat.precision``) the plain
Dense layers are ``BF16Dense`` and ``SpectralNormDense`` multiplies by its
normalised kernel with ``bf16_matmul``; sigma's power iteration, the bias,
the activations and every variable stay float32. Products narrower than
``MIN_BF16_WIDTH`` (the noise input, the one-score output) stay float32.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from rlplat.utils.bf16_dense import bf16_matmul, dense_class

NUM_PIXELS = 64  # 8 x 8 digits, pixels scaled to [-1, 1] for the GAN


def _normalize(x: tf.Tensor) -> tf.Tensor:
    return x / (tf.norm(x) + 1e-12)


class SpectralNormDense(tf.keras.layers.Layer):
    """``x @ (W / sigma(W)) + b``, sigma estimated by power iteration (no gradient through it).

    ``precision`` "bf16": the product ``x @ (W / sigma)`` runs in bfloat16 (``bf16_matmul``); sigma is
    estimated in float32 either way, since its rounding would scale every weight of the layer.
    """

    def __init__(self, units: int, seed: int, precision: str = "fp32", **kwargs):
        super().__init__(**kwargs)
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"SpectralNormDense needs a resolved precision, fp32 or bf16 (got {precision!r})")
        self.units, self.seed, self.precision = int(units), int(seed), precision

    def build(self, input_shape):
        fan_in = int(input_shape[-1])
        self.kernel = self.add_weight(
            "kernel", (fan_in, self.units), initializer=tf.keras.initializers.GlorotUniform(self.seed))
        self.bias = self.add_weight("bias", (self.units,), initializer="zeros")
        self.u = self.add_weight(
            "u", (1, self.units), initializer=tf.keras.initializers.RandomNormal(seed=self.seed + 1),
            trainable=False, synchronization=tf.VariableSynchronization.ON_WRITE,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        super().build(input_shape)

    def sigma(self, training: bool = False) -> tf.Tensor:
        """The largest-singular-value estimate; with ``training`` one more power iteration is kept."""
        w = self.kernel
        v = tf.stop_gradient(_normalize(tf.matmul(self.u, w, transpose_b=True)))  # [1, in]
        u = tf.stop_gradient(_normalize(tf.matmul(v, w)))  # [1, units]
        if training:
            self.u.assign(u)
        return tf.squeeze(tf.matmul(tf.matmul(v, w), u, transpose_b=True))

    def call(self, x, training=False):
        kernel = self.kernel / self.sigma(training)
        product = bf16_matmul(x, kernel) if self.precision == "bf16" else tf.matmul(x, kernel)
        return product + self.bias


def make_generator(noise_dim: int, sizes: Sequence[int], seed: int, precision: str = "fp32") -> tf.keras.Model:
    """Noise ``[B, noise_dim]`` -> images ``[B, 64]`` in [-1, 1]; ``precision``: fp32 or bf16."""
    dense = dense_class(precision)
    model = tf.keras.Sequential(name="generator")
    model.add(tf.keras.Input((noise_dim,)))
    for i, size in enumerate(sizes):
        model.add(dense(size, kernel_initializer=tf.keras.initializers.GlorotUniform(seed + i)))
        model.add(tf.keras.layers.LeakyReLU(0.2))
    model.add(dense(NUM_PIXELS, activation="tanh", kernel_initializer=tf.keras.initializers.GlorotUniform(seed + 99)))
    return model


def make_discriminator(sizes: Sequence[int], spectral_norm: bool, seed: int,
                       precision: str = "fp32") -> tf.keras.Model:
    """Images ``[B, 64]`` -> one real-vs-fake score per image (a logit, unbounded); ``precision``: fp32 or bf16."""
    def dense(units, i):
        if spectral_norm:
            return SpectralNormDense(units, seed=seed + 2 * i, precision=precision)
        return dense_class(precision)(units, kernel_initializer=tf.keras.initializers.GlorotUniform(seed + 2 * i))

    model = tf.keras.Sequential(name="discriminator")
    model.add(tf.keras.Input((NUM_PIXELS,)))
    for i, size in enumerate(sizes):
        model.add(dense(size, i))
        model.add(tf.keras.layers.LeakyReLU(0.2))
    model.add(dense(1, len(sizes)))
    return model
