"""IMPALA networks (tf.keras / Keras 2) and a NumPy copy of the acting path.

One network, shared torso, two heads::

  obs [B, T+1, O] -> ReLU MLP torso -> [LSTM core] -> policy head -> logits [.., A]
                                                                   (or mean, log_std [.., D])
                                                 \\-> value head  -> V [.., 1]

* Discrete actions (``specs.DiscreteArray``): the policy head gives
  categorical logits.
* Continuous actions: a diagonal Gaussian; the head gives the mean and a raw
  log-std squashed smoothly into [LOG_STD_MIN, LOG_STD_MAX] (a tanh, not a
  clip, so its gradient never vanishes at the bounds). Actors clip the
  SAMPLE to [-1, 1] for the environment but record the unclipped sample, so
  the learner's log-probability matches the behaviour policy's.
* The LSTM core's state at the start of every unroll comes from the actor
  (recorded in the unroll's extras), so the learner replays exactly the
  recurrent state the actor acted with.

Actors act at batch 1, where a TF call costs ~450 us and NumPy ~10-30 us
(DESIGN.md section 5): ``NumpyPolicy`` replays the acting path (torso, core,
policy head; no value head) from ``acting_variables(network)`` in NumPy.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0


def squash_log_std(raw):
    """Maps a raw head output smoothly into [LOG_STD_MIN, LOG_STD_MAX] (TF or NumPy)."""
    tanh = tf.tanh if isinstance(raw, tf.Tensor) else np.tanh
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (tanh(raw) + 1.0)


class IMPALANetwork(tf.keras.Model):
    """Torso + optional LSTM core + policy and value heads.

    Args:
      num_outputs: number of actions (discrete) or action dimensions (continuous).
      discrete: categorical policy if True, diagonal Gaussian otherwise.
      layer_sizes: ReLU MLP torso widths.
      core: "mlp" or "lstm".
      lstm_size: LSTM units for ``core == "lstm"``.
    """

    def __init__(self, num_outputs: int, discrete: bool, layer_sizes: Sequence[int],
                 core: str = "mlp", lstm_size: int = 64, name: str = "impala_network"):
        super().__init__(name=name)
        if num_outputs < 1:
            raise ValueError(f"num_outputs must be >= 1 (got {num_outputs})")
        if core not in ("mlp", "lstm"):
            raise ValueError(f"core must be 'mlp' or 'lstm' (got {core!r})")
        self.num_outputs = int(num_outputs)
        self.discrete = bool(discrete)
        self.core = core
        self.lstm_size = int(lstm_size)
        self.torso = [tf.keras.layers.Dense(int(s), activation="relu", name=f"torso_{i}")
                      for i, s in enumerate(layer_sizes)]
        self.lstm = (tf.keras.layers.LSTM(self.lstm_size, return_sequences=True,
                                          return_state=True, name="core")
                     if core == "lstm" else None)
        head_size = self.num_outputs if self.discrete else 2 * self.num_outputs
        # Small policy init: the first policy is near uniform (or unit-std
        # Gaussian around 0), so early unrolls explore.
        self.policy_head = tf.keras.layers.Dense(
            head_size, name="policy_head",
            kernel_initializer=tf.keras.initializers.VarianceScaling(0.01))
        self.value_head = tf.keras.layers.Dense(1, name="value_head")

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per actor (h and c concatenated); 0 for an MLP."""
        return 2 * self.lstm_size if self.lstm is not None else 0

    def initial_state(self, batch_size: int) -> Optional[tf.Tensor]:
        """Zero core state [B, state_size], or None for an MLP."""
        if self.lstm is None:
            return None
        return tf.zeros((batch_size, self.state_size), tf.float32)

    def unroll(self, observations, core_state=None) -> Tuple[tf.Tensor, tf.Tensor]:
        """Runs the network over whole unrolls.

        Args:
          observations: [B, T+1, O] float32.
          core_state: [B, 2 * lstm_size] (h then c) at the first step, for the
            LSTM core; ignored for an MLP.

        Returns:
          ``(policy_outputs, values)``: [B, T+1, P] (logits, or mean and raw
          log-std concatenated; use ``split_gaussian``) and [B, T+1].
        """
        x = tf.convert_to_tensor(observations, tf.float32)
        for layer in self.torso:
            x = layer(x)
        if self.lstm is not None:
            if core_state is None:
                core_state = self.initial_state(tf.shape(x)[0])
            h, c = tf.split(tf.convert_to_tensor(core_state, tf.float32), 2, axis=-1)
            x, _, _ = self.lstm(x, initial_state=[h, c])
        return self.policy_head(x), tf.squeeze(self.value_head(x), -1)

    def call(self, observations, core_state=None):
        """One step: observations [B, O] -> (policy outputs [B, P], values [B])."""
        policy, values = self.unroll(tf.expand_dims(observations, 1), core_state)
        return policy[:, 0], values[:, 0]


def split_gaussian(policy_outputs) -> Tuple[tf.Tensor, tf.Tensor]:
    """Gaussian head outputs [..., 2D] -> (mean [..., D], log_std [..., D])."""
    mean, raw = tf.split(policy_outputs, 2, axis=-1)
    return mean, squash_log_std(raw)


def make_network(environment_spec, config) -> IMPALANetwork:
    """The network for ``environment_spec``'s actions, built (variables exist).

    Discrete actions need a ``DiscreteArray`` spec; anything else is a
    continuous box of ``prod(shape)`` dimensions.
    """
    from dm_env import specs  # pylint: disable=g-import-not-at-top

    actions = environment_spec.actions
    discrete = isinstance(actions, specs.DiscreteArray)
    num_outputs = int(actions.num_values) if discrete else int(np.prod(actions.shape))
    net = IMPALANetwork(num_outputs, discrete, config.layer_sizes, config.core, config.lstm_size)
    obs_size = int(np.prod(environment_spec.observations.shape))
    net.unroll(tf.zeros((1, 2, obs_size)), net.initial_state(1))
    return net


def acting_variables(network: IMPALANetwork) -> List[tf.Variable]:
    """The variables actors need, in ``NumpyPolicy.load`` order: torso, core, policy head."""
    out: List[tf.Variable] = []
    for layer in network.torso:
        out += [layer.kernel, layer.bias]
    if network.lstm is not None:
        cell = network.lstm.cell
        out += [cell.kernel, cell.recurrent_kernel, cell.bias]
    out += [network.policy_head.kernel, network.policy_head.bias]
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


class NumpyPolicy:
    """The acting path of an ``IMPALANetwork`` in NumPy, one observation at a time.

    Args:
      num_torso_layers: number of torso Dense layers.
      lstm: whether there is an LSTM core.
      discrete: categorical (logits) or Gaussian (mean, log_std) head.
    """

    def __init__(self, num_torso_layers: int, lstm: bool, discrete: bool):
        self._num_torso = int(num_torso_layers)
        self._lstm = bool(lstm)
        self.discrete = bool(discrete)
        self._torso: List[Tuple[np.ndarray, np.ndarray]] = []
        self._core: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]] = None
        self._head: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self.state_size = 0

    @classmethod
    def for_network(cls, network: IMPALANetwork) -> "NumpyPolicy":
        """A policy shaped like ``network``, loaded with its current weights."""
        policy = cls(len(network.torso), network.lstm is not None, network.discrete)
        policy.load([v.numpy() for v in acting_variables(network)])
        return policy

    @property
    def num_arrays(self) -> int:
        return 2 * self._num_torso + (3 if self._lstm else 0) + 2

    def load(self, arrays: Sequence[np.ndarray]) -> None:
        """Takes arrays in ``acting_variables`` order."""
        if len(arrays) != self.num_arrays:
            raise ValueError(f"policy weights: got {len(arrays)} arrays, the network has "
                             f"{self.num_arrays}; actor and learner were built from different configs")
        arrays = [np.asarray(a, np.float32) for a in arrays]
        self._torso = [(arrays[2 * i], arrays[2 * i + 1]) for i in range(self._num_torso)]
        i = 2 * self._num_torso
        if self._lstm:
            self._core = (arrays[i], arrays[i + 1], arrays[i + 2])
            self.state_size = 2 * arrays[i + 1].shape[0]
            i += 3
        self._head = (arrays[i], arrays[i + 1])

    def initial_state(self) -> Optional[np.ndarray]:
        """Zero core state [2 * lstm_size], or None for an MLP."""
        return np.zeros(self.state_size, np.float32) if self._lstm else None

    def __call__(self, observation: np.ndarray, state: Optional[np.ndarray] = None):
        """Returns ``(policy_outputs [P], next_state)`` (next_state None for an MLP).

        ``policy_outputs`` are logits, or the Gaussian head's mean and RAW
        log-std concatenated (see ``squash_log_std``), as in ``unroll``.
        """
        x = np.asarray(observation, np.float32).reshape(-1)
        for w, b in self._torso:
            x = np.dot(x, w)
            x += b
            np.maximum(x, 0.0, out=x)
        next_state = None
        if self._lstm:
            kernel, recurrent, bias = self._core
            units = recurrent.shape[0]
            h, c = state[:units], state[units:]
            z = np.dot(x, kernel) + np.dot(h, recurrent) + bias
            # Keras gate order: input, forget, cell candidate, output.
            i = _sigmoid(z[:units])
            f = _sigmoid(z[units:2 * units])
            g = np.tanh(z[2 * units:3 * units])
            o = _sigmoid(z[3 * units:])
            c = f * c + i * g
            h = o * np.tanh(c)
            x = h
            next_state = np.concatenate([h, c]).astype(np.float32)
        w, b = self._head
        out = np.dot(x, w)
        out += b
        return out, next_state
