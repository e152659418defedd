"""``BF16Dense``: a Keras Dense layer whose matrix product runs in bfloat16, everything else in float32.

The learners' ``precision="bf16"`` (``rlplat.precision``) builds their
networks' dense layers from this class. Its kernel and bias are float32
variables (so optimizers, checkpoints and the weights actors receive do not
change); each call casts the input and the kernel to bfloat16, multiplies
(oneDNN's AVX-512 BF16 / AMX kernels accumulate in float32), casts the
product back to float32 and adds the bias and applies the activation in
float32. The gradients flow back through the casts, so the backward products
run in bfloat16 too and the variables' gradients arrive in float32.
``bf16_matmul`` is that product alone, for layers that are not a Dense (the
GAN's spectrally normalised one, whose kernel is divided before the product).

Why not Keras' ``mixed_bfloat16`` policy, which keeps the bias, the
activation, the layer norm's output and their gradients in bfloat16 as well:
TensorFlow 2.15's CPU element-wise kernels (BiasAdd, Elu and their
gradients) convert bfloat16 element by element, so on a 3-layer 512-wide
torso at batch 256 the policy ran no faster than fp32 while casting around
the product alone ran ~1.4x faster (forward + backward, 2-core AVX-512 BF16
CPU; bench/learner_roofline.py measures the whole step).
"""

from __future__ import annotations

from typing import Type

import tensorflow as tf


# A product with an input or output this narrow stays float32: its three casts cost more than
# bfloat16 saves (the critic's 51-atom head, a 1-D action, the observation layer; per-shape times
# in bench/results/learner_roofline.json, "bf16_casts").
MIN_BF16_WIDTH = 64


def multiplies_in_bf16(fan_in: int, units: int) -> bool:
    """Whether a ``[..., fan_in] @ [fan_in, units]`` product is wide enough for bfloat16 (``MIN_BF16_WIDTH``)."""
    return min(int(fan_in), int(units)) >= MIN_BF16_WIDTH


def bf16_matmul(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """``x @ kernel`` in bfloat16, returned in float32 (the product of ``BF16Dense``; see the module doc).

    ``x`` is ``[..., K]`` (leading axes flattened into one 2-D product), ``kernel``
    ``[K, N]``, both float32; gradients flow back through the casts in float32. A
    product narrower than ``MIN_BF16_WIDTH`` on either side runs in float32.
    """
    units = int(kernel.shape[-1])
    if multiplies_in_bf16(x.shape[-1], units):
        x, kernel = tf.cast(x, tf.bfloat16), tf.cast(kernel, tf.bfloat16)
    if x.shape.rank == 2:
        y = tf.matmul(x, kernel)
    else:  # [B, T, ..., K]: one 2-D product over the flattened leading axes
        y = tf.reshape(tf.matmul(tf.reshape(x, [-1, tf.shape(x)[-1]]), kernel),
                       tf.concat([tf.shape(x)[:-1], [units]], 0))
    return tf.cast(y, tf.float32)


class BF16Dense(tf.keras.layers.Dense):
    """``tf.keras.layers.Dense`` with a bfloat16 product and float32 state and output (see the module doc).

    Layers with fewer than ``MIN_BF16_WIDTH`` inputs or units multiply in float32.
    """

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        if not multiplies_in_bf16(inputs.shape[-1], self.units):
            return super().call(inputs)  # Keras' own float32 Dense, bias and activation fused
        y = tf.cast(bf16_matmul(inputs, self.kernel), self.compute_dtype)
        if self.use_bias:
            y = tf.nn.bias_add(y, self.bias)
        return self.activation(y) if self.activation is not None else y


def dense_class(precision: str) -> Type[tf.keras.layers.Dense]:
    """The Dense class for a resolved ``precision``: ``tf.keras.layers.Dense`` (fp32) or ``BF16Dense`` (bf16)."""
    if precision == "fp32":
        return tf.keras.layers.Dense
    if precision == "bf16":
        return BF16Dense
    raise ValueError(f"dense_class needs a resolved precision, fp32 or bf16 (got {precision!r})")
