"""IMPALA's acting path in NumPy, importable without TensorFlow.

Actors and evaluators run ``NumpyPolicy``; only building one from a Keras
``IMPALANetwork`` (``networks.numpy_policy_of``) needs TensorFlow, so a policy
built in the learner's process can be used by one that never imports it.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from rlplat.utils import numpy_layers

LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0
# Observation normalisation: (obs - mean) / sqrt(var + eps), clipped.
OBS_NORM_EPS, OBS_NORM_CLIP = 1e-6, 10.0


def squash_log_std_numpy(raw: np.ndarray, low: float = LOG_STD_MIN, high: float = LOG_STD_MAX) -> np.ndarray:
    """Maps a raw head output smoothly into [low, high] (``networks.squash_log_std`` on arrays)."""
    return low + 0.5 * (high - low) * (np.tanh(raw) + 1.0)


def normalize_numpy(observation: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """NumPy twin of the network's observation normalisation."""
    out = (observation - mean) / np.sqrt(var + OBS_NORM_EPS)
    return np.clip(out, -OBS_NORM_CLIP, OBS_NORM_CLIP).astype(np.float32)


class NumpyPolicy:
    """The acting path of an ``IMPALANetwork`` in NumPy, one observation at a time.

    Observation normalisation (IMPALA's own), then the torso, core and policy
    head as ``rlplat.utils.numpy_layers`` ops read from the network's layers.

    Args:
      template: ``numpy_layers.export_layers(acting_layers(network))``.
      discrete: categorical (logits) or Gaussian (mean, log_std) head.
      normalize_observations: whether the weights start with the observation
        mean and variance (``IMPALANetwork.normalize_observations``).
    """

    def __init__(self, template: Sequence[Dict[str, Any]], discrete: bool, normalize_observations: bool = False):
        self._forward = numpy_layers.NumpyForward(template)
        self._normalize = bool(normalize_observations)
        self.discrete = bool(discrete)
        self.state_size = self._forward.state_size
        self._moments: Optional[Tuple[np.ndarray, np.ndarray]] = None

    @property
    def num_arrays(self) -> int:
        return (2 if self._normalize else 0) + self._forward.num_arrays

    def load(self, arrays: Sequence[np.ndarray]) -> None:
        """Takes arrays in ``acting_variables`` order."""
        if len(arrays) != self.num_arrays:
            raise ValueError(f"policy weights: got {len(arrays)} arrays, the network has "
                             f"{self.num_arrays}; actor and learner were built from different configs")
        if self._normalize:
            self._moments = (np.asarray(arrays[0], np.float32), np.asarray(arrays[1], np.float32))
            arrays = arrays[2:]
        self._forward.load(arrays)

    def initial_state(self) -> Optional[np.ndarray]:
        """Zero core state [2 * lstm_size], or None for an MLP."""
        return self._forward.initial_state()

    def __call__(self, observation: np.ndarray, state: Optional[np.ndarray] = None):
        """Returns ``(policy_outputs [P], next_state)`` (next_state None for an MLP).

        ``policy_outputs`` are logits, or the Gaussian head's mean and RAW
        log-std concatenated (see ``squash_log_std``), as in ``unroll``.
        """
        x = np.asarray(observation, np.float32).reshape(-1)
        if self._normalize:
            x = normalize_numpy(x, *self._moments)
        return self._forward.step(x, state)

    def batch(self, observations: np.ndarray) -> np.ndarray:
        """Policy outputs [K, P] for K observations of a feed-forward network, in one pass."""
        if self.state_size:
            raise ValueError("an LSTM policy acts one environment at a time (each has its own core state)")
        x = np.asarray(observations, np.float32).reshape(len(observations), -1)
        if self._normalize:
            x = normalize_numpy(x, *self._moments)
        return self._forward.batch(x)[0]
