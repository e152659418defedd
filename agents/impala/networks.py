"""IMPALA networks (tf.keras / Keras 2) and their acting path in NumPy.

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
(measured on 2-core CPUs): ``NumpyPolicy`` (``numpy_policy``, which imports no
TensorFlow) runs the acting path (torso, core, policy head; no value head) in
NumPy, its ops read from the layers (``numpy_layers``).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from rlplat.utils import numpy_layers
from rlplat.utils.bf16_dense import dense_class
from rlplat_agents.impala.numpy_policy import (  # noqa: F401  (the acting path, re-exported)
    LOG_STD_MAX, LOG_STD_MIN, OBS_NORM_CLIP, OBS_NORM_EPS, NumpyPolicy, normalize_numpy, squash_log_std_numpy)


def squash_log_std(raw, low: float = LOG_STD_MIN, high: float = LOG_STD_MAX):
    """Maps a raw head output smoothly into [low, high] (TF or NumPy)."""
    if not isinstance(raw, tf.Tensor):
        return squash_log_std_numpy(raw, low, high)
    return low + 0.5 * (high - low) * (tf.tanh(raw) + 1.0)


def unsquash_log_std(log_std: float, low: float = LOG_STD_MIN, high: float = LOG_STD_MAX) -> float:
    """The raw head output ``squash_log_std`` maps to ``log_std`` (strictly inside the bounds)."""
    if not low < log_std < high:
        raise ValueError(f"log_std {log_std} must be strictly between {low} and {high}")
    return float(np.arctanh(2.0 * (log_std - low) / (high - low) - 1.0))


class IMPALANetwork(tf.keras.Model):
    """[Observation normaliser] + torso + optional LSTM core + policy and value heads.

    Args:
      num_outputs: number of actions (discrete) or action dimensions (continuous).
      discrete: categorical policy if True, diagonal Gaussian otherwise.
      layer_sizes: ReLU MLP torso widths.
      core: "mlp" or "lstm".
      lstm_size: LSTM units for ``core == "lstm"``.
      observation_size: flat observation size (needed to normalise observations).
      normalize_observations: feed ``clip((obs - mean) / sqrt(var + eps), +-10)``
        to the torso, with running moments the LEARNER updates
        (``update_observation_moments``) and actors receive with the weights.
      log_std_bounds: the Gaussian log-std's (low, high).
      init_log_std: the Gaussian log-std of the initial policy (None: the
        middle of the bounds).
      separate_value: the value head gets its own ReLU MLP (``layer_sizes``)
        on the normalised observation (and, with an LSTM, the core's output
        under stop_gradient), so value regression never moves the policy's
        features and the policy gradient never moves the value's.
      precision: "fp32", or "bf16" (``rlplat.precision``): the ReLU torsos'
        products run in bfloat16; the LSTM core (its state is carried across
        steps) and the heads (a few units wide) stay float32, as do every
        weight and output.
    """

    def __init__(self, num_outputs: int, discrete: bool, layer_sizes: Sequence[int],
                 core: str = "mlp", lstm_size: int = 64, *, observation_size: Optional[int] = None,
                 normalize_observations: bool = False,
                 log_std_bounds: Tuple[float, float] = (LOG_STD_MIN, LOG_STD_MAX),
                 init_log_std: Optional[float] = None, separate_value: bool = False,
                 precision: str = "fp32", name: str = "impala_network"):
        super().__init__(name=name)
        if num_outputs < 1:
            raise ValueError(f"num_outputs must be >= 1 (got {num_outputs})")
        if core not in ("mlp", "lstm"):
            raise ValueError(f"core must be 'mlp' or 'lstm' (got {core!r})")
        if normalize_observations and not observation_size:
            raise ValueError("normalize_observations needs observation_size")
        self.num_outputs = int(num_outputs)
        self.discrete = bool(discrete)
        self.core = core
        self.lstm_size = int(lstm_size)
        self.log_std_bounds = (float(log_std_bounds[0]), float(log_std_bounds[1]))
        self.normalize_observations = bool(normalize_observations)
        if self.normalize_observations:
            # Written only by the learner, identically on every replica.
            moments = dict(trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.obs_mean = self.add_weight(name="obs_mean", shape=(int(observation_size),),
                                            initializer="zeros", **moments)
            self.obs_var = self.add_weight(name="obs_var", shape=(int(observation_size),),
                                           initializer="ones", **moments)
            self.obs_count = self.add_weight(name="obs_count", shape=(), initializer="zeros",
                                             **moments)
        dense = dense_class(precision)
        self.torso = [dense(int(s), activation="relu", name=f"torso_{i}") for i, s in enumerate(layer_sizes)]
        self.lstm = (tf.keras.layers.LSTM(self.lstm_size, return_sequences=True,
                                          return_state=True, name="core")
                     if core == "lstm" else None)
        head_size = self.num_outputs if self.discrete else 2 * self.num_outputs
        # Small policy init: the first policy is near uniform (or a Gaussian
        # around 0 whose log-std is init_log_std), so early unrolls explore.
        bias = "zeros"
        if not self.discrete and init_log_std is not None:
            raw = unsquash_log_std(init_log_std, *self.log_std_bounds)
            bias = tf.keras.initializers.Constant(
                [0.0] * self.num_outputs + [raw] * self.num_outputs)
        self.policy_head = tf.keras.layers.Dense(
            head_size, name="policy_head", bias_initializer=bias,
            kernel_initializer=tf.keras.initializers.VarianceScaling(0.01))
        self.value_torso = ([dense(int(s), activation="relu", name=f"value_torso_{i}")
                             for i, s in enumerate(layer_sizes)] if separate_value else [])
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

    def normalize(self, observations) -> tf.Tensor:
        """Observations as the torso sees them (identity without normalisation)."""
        x = tf.convert_to_tensor(observations, tf.float32)
        if not self.normalize_observations:
            return x
        x = (x - self.obs_mean) * tf.math.rsqrt(self.obs_var + OBS_NORM_EPS)
        return tf.clip_by_value(x, -OBS_NORM_CLIP, OBS_NORM_CLIP)

    def update_observation_moments(self, count, shifted_sum, shifted_sum_sq) -> tf.Operation:
        """Merges a batch's moments into the running ones (Chan et al.'s parallel update).

        Args:
          count: observations in the batch (all replicas).
          shifted_sum: sum of ``obs - obs_mean`` over them, [O].
          shifted_sum_sq: sum of ``(obs - obs_mean)^2``, [O] (shifting by the
            current mean keeps float32 sums accurate).
        """
        count = tf.cast(count, tf.float32)
        total = self.obs_count + count
        safe_n = tf.maximum(count, 1.0)
        delta = shifted_sum / safe_n  # batch mean - running mean
        batch_m2 = tf.maximum(shifted_sum_sq - safe_n * tf.square(delta), 0.0)
        weight = count / tf.maximum(total, 1.0)
        new_mean = self.obs_mean + delta * weight
        new_m2 = self.obs_var * self.obs_count + batch_m2 + tf.square(delta) * self.obs_count * weight
        new_var = tf.where(total > 1.0, new_m2 / tf.maximum(total, 1.0), self.obs_var)
        keep = count > 0
        return tf.group(
            self.obs_mean.assign(tf.where(keep, new_mean, self.obs_mean)),
            self.obs_var.assign(tf.where(keep, new_var, self.obs_var)),
            self.obs_count.assign(total))

    def unroll(self, observations, core_state=None) -> Tuple[tf.Tensor, tf.Tensor]:
        """Runs the network over whole unrolls.

        Args:
          observations: [B, T+1, O] float32.
          core_state: [B, 2 * lstm_size] (h then c) at the first step, for the
            LSTM core; ignored for an MLP.

        Returns:
          ``(policy_outputs, values)``: [B, T+1, P] (logits, or mean and raw
          log-std concatenated; use ``gaussian``) and [B, T+1].
        """
        obs = self.normalize(observations)
        x = obs
        for layer in self.torso:
            x = layer(x)
        if self.lstm is not None:
            if core_state is None:
                core_state = self.initial_state(tf.shape(x)[0])
            h, c = tf.split(tf.convert_to_tensor(core_state, tf.float32), 2, axis=-1)
            x, _, _ = self.lstm(x, initial_state=[h, c])
        v = x
        if self.value_torso:
            v = obs if self.lstm is None else tf.concat([obs, tf.stop_gradient(x)], axis=-1)
            for layer in self.value_torso:
                v = layer(v)
        return self.policy_head(x), tf.squeeze(self.value_head(v), -1)

    def call(self, observations, core_state=None):
        """One step: observations [B, O] -> (policy outputs [B, P], values [B])."""
        policy, values = self.unroll(tf.expand_dims(observations, 1), core_state)
        return policy[:, 0], values[:, 0]

    def gaussian(self, policy_outputs) -> Tuple[tf.Tensor, tf.Tensor]:
        """Gaussian head outputs [..., 2D] -> (mean [..., D], log_std [..., D]) in this net's bounds."""
        return split_gaussian(policy_outputs, *self.log_std_bounds)


def split_gaussian(policy_outputs, low: float = LOG_STD_MIN,
                   high: float = LOG_STD_MAX) -> Tuple[tf.Tensor, tf.Tensor]:
    """Gaussian head outputs [..., 2D] -> (mean [..., D], log_std [..., D])."""
    mean, raw = tf.split(policy_outputs, 2, axis=-1)
    return mean, squash_log_std(raw, low, high)


def make_network(environment_spec, config, precision: str = "fp32") -> IMPALANetwork:
    """The network for ``environment_spec``'s actions, built (variables exist), in resolved ``precision``.

    Discrete actions need a ``DiscreteArray`` spec; anything else is a
    continuous box of ``prod(shape)`` dimensions.
    """
    from dm_env import specs  # pylint: disable=g-import-not-at-top

    actions = environment_spec.actions
    discrete = isinstance(actions, specs.DiscreteArray)
    num_outputs = int(actions.num_values) if discrete else int(np.prod(actions.shape))
    obs_size = int(np.prod(environment_spec.observations.shape))
    net = IMPALANetwork(num_outputs, discrete, config.layer_sizes, config.core, config.lstm_size,
                        observation_size=obs_size,
                        normalize_observations=config.normalize_observations,
                        log_std_bounds=(config.min_log_std, config.max_log_std),
                        init_log_std=config.init_log_std,
                        separate_value=config.separate_value_network, precision=precision)
    net.unroll(tf.zeros((1, 2, obs_size)), net.initial_state(1))
    return net


def greedy_actions(network: IMPALANetwork, observations, squash: str = "tanh") -> tf.Tensor:
    """What the greedy ``IMPALAActor`` sends the environment, in TensorFlow, for an MLP core.

    Observations [B, O] -> int32 argmax of the logits [B], or the Gaussian
    mean squashed as the actor squashes it (``squash``: "tanh" or "clip") [B, D].
    The value head is not run: acting never reads it.
    """
    if network.lstm is not None:
        raise ValueError("greedy_actions serves the MLP core only (an LSTM needs its state carried)")
    x = network.normalize(observations)
    for layer in network.torso:
        x = layer(x)
    out = network.policy_head(x)
    if network.discrete:
        return tf.argmax(out, axis=-1, output_type=tf.int32)
    mean = out[..., :network.num_outputs]
    return tf.tanh(mean) if squash == "tanh" else tf.clip_by_value(mean, -1.0, 1.0)


def acting_variables(network: IMPALANetwork) -> List[tf.Variable]:
    """The variables actors need, in ``NumpyPolicy.load`` order.

    Observation mean and variance (with normalisation), torso, core, policy head.
    """
    out: List[tf.Variable] = []
    if network.normalize_observations:
        out += [network.obs_mean, network.obs_var]
    for layer in network.torso:
        out += [layer.kernel, layer.bias]
    if network.lstm is not None:
        cell = network.lstm.cell
        out += [cell.kernel, cell.recurrent_kernel, cell.bias]
    out += [network.policy_head.kernel, network.policy_head.bias]
    return out


def acting_layers(network: IMPALANetwork) -> List[tf.keras.layers.Layer]:
    """The Keras layers actors run after normalising: torso, core, policy head."""
    return [*network.torso, *([network.lstm] if network.lstm is not None else []), network.policy_head]


def numpy_policy_of(network: IMPALANetwork) -> NumpyPolicy:
    """A ``NumpyPolicy`` shaped like ``network``, loaded with its current weights."""
    policy = NumpyPolicy(numpy_layers.export_layers(acting_layers(network)), network.discrete,
                         network.normalize_observations)
    policy.load([v.numpy() for v in acting_variables(network)])
    return policy
