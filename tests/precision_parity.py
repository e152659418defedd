"""Shared bars for the bf16-against-fp32 learner tests (``rlplat.precision``), with the tolerances' reasons.

- A loss within ``LOSS_RTOL`` (1%) of fp32's: bfloat16 keeps 8 significant bits
  (relative rounding 2^-9, ~0.2%) and every loss reads float32 outputs.
- A network's gradient within ``GRAD_RTOL`` (5%) of fp32's in relative L2
  norm, and cosine above ``MIN_COSINE``: rounding errors of the products add up
  over the inner dimension (hundreds of units) but stay unbiased.
- After k Adam steps at learning rate lr every weight within ``2 lr k`` of
  fp32's (Adam moves a weight by about lr a step whatever the gradient's size,
  so one flipped sign of a near-zero gradient element is 2 lr), and each
  variable's mean absolute difference under ``lr k / 4``.
"""

from collections import Counter
from typing import Sequence

import numpy as np
import tensorflow as tf

LOSS_RTOL = 1e-2
GRAD_RTOL = 5e-2
MIN_COSINE = 0.995


def matmul_dtypes(function, *args) -> Counter:
    """{dtype name: count} of the MatMul ops in ``function``'s traced graph (a ``tf.function``) on ``args``."""
    graph = function.get_concrete_function(*args).graph
    return Counter(op.get_attr("T").name for op in graph.get_operations()
                   if op.type in ("MatMul", "_FusedMatMul", "BatchMatMulV2"))


def flat(arrays: Sequence) -> np.ndarray:
    """The arrays (tensors) as one float vector."""
    return np.concatenate([np.ravel(np.asarray(a)) for a in arrays])


def assert_gradients_match(name: str, fp32: Sequence, bf16: Sequence, rtol: float = GRAD_RTOL,
                           min_cosine: float = MIN_COSINE) -> None:
    """Float32 gradients, close to fp32's in relative L2 norm and direction (prints the figures)."""
    assert all(g.dtype == tf.float32 for g in bf16), f"{name}: bf16 gradients must be float32"
    g16, g32 = flat(bf16), flat(fp32)
    rel = float(np.linalg.norm(g16 - g32) / np.linalg.norm(g32))
    cos = float(g16 @ g32 / (np.linalg.norm(g16) * np.linalg.norm(g32)))
    print(f"{name} gradient: relative L2 error {rel:.4f}, cosine {cos:.5f}")
    assert rel < rtol and cos > min_cosine, (name, rel, cos)


def assert_losses_match(names: Sequence[str], fp32: Sequence, bf16: Sequence, atol: float = 0.0) -> None:
    """Each loss within ``LOSS_RTOL`` (prints them)."""
    for name, a, b in zip(names, fp32, bf16):
        print(f"{name}: fp32 {float(a):.6g}, bf16 {float(b):.6g}")
        np.testing.assert_allclose(float(b), float(a), rtol=LOSS_RTOL, atol=atol, err_msg=name)


def assert_weights_close(fp32: Sequence[np.ndarray], bf16: Sequence[np.ndarray], lr: float, steps: int) -> None:
    """The weights after ``steps`` Adam steps at ``lr``, within the bars above (prints the worst figures)."""
    worst = mean = 0.0
    for i, (a, b) in enumerate(zip(fp32, bf16)):
        diff = np.abs(np.asarray(b) - np.asarray(a))
        worst, mean = max(worst, float(diff.max())), max(mean, float(diff.mean()))
        assert diff.max() <= 2 * lr * steps * 1.01, (i, float(diff.max()))
        assert diff.mean() < lr * steps / 4, (i, float(diff.mean()))
    print(f"after {steps} steps: max |w_bf16 - w_fp32| {worst:.2e}, worst per-variable mean {mean:.2e} (lr {lr})")


# /proc/cpuinfo text of a CPU with bfloat16 instructions, for ``precision.resolve``.
BF16_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16\n"


def assert_auto_stays_fp32_without_parity(config_class) -> None:
    """An agent that declares no bf16 parity: ``auto`` is fp32 even on a bfloat16 CPU, and says why;
    a bad value is refused in one line."""
    import pytest  # pylint: disable=g-import-not-at-top

    from rlplat import precision  # pylint: disable=g-import-not-at-top

    config = config_class(precision="auto")
    assert not precision.bf16_parity(config)
    got = precision.resolve(config.precision, bf16_parity=precision.bf16_parity(config), cpuinfo=BF16_CPUINFO)
    assert got.precision == "fp32" and "parity" in got.reason, got
    assert "parity" in got.line(precision.agent_label(config))
    with pytest.raises(ValueError, match=r"^precision must be one of auto, fp32, bf16 \(got 'fp16'\)") as error:
        config_class(precision="fp16")
    assert "\n" not in str(error.value)
