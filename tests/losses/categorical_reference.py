"""Slow NumPy references shared by the D4PG loss tests (explicit loops, float64)."""

import math

import numpy as np


def reference_project(z_p, probs, v_min, v_max, num_atoms):
    """C51 projection (Bellemare et al. 2017, Algorithm 1), one atom at a time.

    Uniform target support linspace(v_min, v_max, num_atoms). When the
    target lands exactly on an atom (l == u) the mass goes to that atom;
    Algorithm 1 as printed would drop it (both weights are 0).
    """
    probs = np.asarray(probs, np.float64)
    z_p = np.broadcast_to(np.asarray(z_p, np.float64), probs.shape)
    delta_z = (v_max - v_min) / (num_atoms - 1)
    out = np.zeros((probs.shape[0], num_atoms))
    for b in range(probs.shape[0]):
        for j in range(probs.shape[1]):
            tz = min(max(z_p[b, j], v_min), v_max)
            pos = (tz - v_min) / delta_z
            lo = min(math.floor(pos), num_atoms - 1)
            hi = min(math.ceil(pos), num_atoms - 1)
            if lo == hi:
                out[b, lo] += probs[b, j]
            else:
                out[b, lo] += probs[b, j] * (hi - pos)
                out[b, hi] += probs[b, j] * (pos - lo)
    return out


def log_softmax(x):
    """Numerically stable log-softmax over the last axis, float64."""
    x = np.asarray(x, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
