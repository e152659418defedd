"""D4PG networks (tf.keras / Keras 2).

Shapes follow Acme's D4PG control networks:

* policy:  obs [B, O] -> Dense+LayerNorm+tanh -> Dense+elu ... -> Dense(A) -> tanh, so actions lie
  in [-1, 1]; rescaling to the environment's action bounds is the environment wrapper's job.
* critic:  concat(obs [B, O], action [B, A]) -> same layer-norm MLP torso -> ``DiscreteValuedHead``
  -> logits [B, num_atoms] over a fixed support ``linspace(v_min, v_max, num_atoms)``.

Actors run the policy at batch 1, where even a tf.function call costs ~430 us (eager Keras ~3 ms)
against ~60 us for plain NumPy (default sizes, 2-core dev box), so they run it through
``rlplat.utils.numpy_layers``, which reads the ops from this Keras policy's layers.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np
import tensorflow as tf

from rlplat.utils.bf16_dense import dense_class  # "bf16": every Dense multiplies in bfloat16, the rest float32

# Sonnet's LayerNorm epsilon (Acme's networks are Sonnet); Keras' default is 1e-3.
_LAYER_NORM_EPSILON = 1e-5


def torso_initializer(mode: str = "fan_out") -> tf.keras.initializers.Initializer:
    """Uniform variance scaling with scale 1/3 over ``mode`` ("fan_out" or "fan_in").

    The reference layer-norm MLP scales by fan-out: a weight's variance is
    1 / (3 * fan_out). For the first layer (fan-in = observation size, a few
    units; fan-out = 256-512) fan-in scaling makes the weights 7-9x larger.
    LayerNorm right after hides the scale from the forward pass, but Adam's
    steps have a fixed size in weight units, so larger weights learn
    relatively slower.
    """
    if mode not in ("fan_out", "fan_in"):
        raise ValueError(f"torso init mode must be 'fan_out' or 'fan_in' (got {mode!r})")
    return tf.keras.initializers.VarianceScaling(scale=1.0 / 3.0, mode=mode,
                                                 distribution="uniform")


def _layer_norm_mlp(layer_sizes: Sequence[int], name: str,
                    init_mode: str = "fan_out", dense: Any = tf.keras.layers.Dense) -> List[tf.keras.layers.Layer]:
    """Layers of a layer-norm MLP: Dense+LayerNorm+tanh, then Dense+elu.

    The tanh after the first LayerNorm bounds the torso's input features
    whatever the observation scale; the remaining layers use elu and are all
    activated (including the last), as the heads add their own linear layer.
    """
    sizes = [int(s) for s in layer_sizes]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"layer_sizes must be non-empty positive ints (got {layer_sizes!r})")
    layers: List[tf.keras.layers.Layer] = [
        dense(sizes[0], kernel_initializer=torso_initializer(init_mode), name=f"{name}_dense_0"),
        tf.keras.layers.LayerNormalization(axis=-1, epsilon=_LAYER_NORM_EPSILON,
                                           name=f"{name}_layer_norm"),
        tf.keras.layers.Activation("tanh", name=f"{name}_tanh"),
    ]
    for i, size in enumerate(sizes[1:], start=1):
        layers.append(dense(size, activation="elu", kernel_initializer=torso_initializer(init_mode),
                            name=f"{name}_dense_{i}"))
    return layers


def make_policy_network(action_size: int, layer_sizes: Sequence[int],
                        init_mode: str = "fan_out", precision: str = "fp32") -> tf.keras.Sequential:
    """Deterministic policy pi(obs) -> action in [-1, 1].

    Args:
      action_size: A, the flat action dimension.
      layer_sizes: hidden sizes of the layer-norm MLP torso.
      init_mode: the torso's ``torso_initializer`` mode.

    Returns:
      A ``tf.keras.Sequential`` mapping obs [B, O] float32 -> actions [B, A].
      It is built lazily on the first call (O is taken from the input).
    """
    if action_size < 1:
        raise ValueError(f"action_size must be >= 1 (got {action_size})")
    layers = _layer_norm_mlp(layer_sizes, "policy", init_mode, dense_class(precision))
    # Near-zero output init (scale 1e-4): the initial policy outputs ~0 so
    # early exploration is driven by the actors' Gaussian noise, not by
    # saturated tanh outputs from a random init.
    layers.append(dense_class(precision)(
        action_size,
        kernel_initializer=tf.keras.initializers.VarianceScaling(
            scale=1e-4, mode="fan_in", distribution="truncated_normal"),
        name="policy_output"))
    layers.append(tf.keras.layers.Activation("tanh", name="policy_squash"))
    return tf.keras.Sequential(layers, name="d4pg_policy")


def make_atoms(v_min: float, v_max: float, num_atoms: int) -> tf.Tensor:
    """The critic's fixed support: float32 [num_atoms] from v_min to v_max."""
    if num_atoms < 2 or not v_min < v_max:
        raise ValueError(f"need num_atoms >= 2 and v_min < v_max "
                         f"(got {num_atoms}, {v_min}, {v_max})")
    return tf.linspace(tf.constant(v_min, tf.float32),
                       tf.constant(v_max, tf.float32), num_atoms)


class DiscreteValuedHead(tf.keras.layers.Layer):
    """Linear layer producing logits over a fixed categorical value support.

    ``atoms`` [N] is the support; ``mean(logits)`` is the expected value
    sum_i softmax(logits)_i * atoms_i, i.e. Q(s, a) for the critic.
    """

    def __init__(self, v_min: float, v_max: float, num_atoms: int, dense: Any = tf.keras.layers.Dense, **kwargs: Any):
        super().__init__(**kwargs)
        self.atoms = make_atoms(v_min, v_max, num_atoms)
        self._logits = dense(num_atoms, name="logits")

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        """features [B, F] -> logits [B, num_atoms]."""
        return self._logits(inputs)

    def mean(self, logits: tf.Tensor) -> tf.Tensor:
        """logits [B, N] -> expected value [B]."""
        return tf.reduce_sum(tf.nn.softmax(logits, axis=-1) * self.atoms, axis=-1)


class CriticNetwork(tf.keras.Model):
    """Distributional critic: (obs [B, O], action [B, A]) -> logits [B, N].

    ``atoms`` exposes the head's support; ``mean(logits)`` gives Q [B].
    """

    def __init__(self, num_atoms: int, layer_sizes: Sequence[int],
                 v_min: float, v_max: float, name: str = "d4pg_critic",
                 init_mode: str = "fan_out", precision: str = "fp32"):
        super().__init__(name=name)
        self._torso = tf.keras.Sequential(_layer_norm_mlp(layer_sizes, "critic", init_mode, dense_class(precision)),
                                          name="critic_torso")
        self.head = DiscreteValuedHead(v_min, v_max, num_atoms, dense_class(precision), name="critic_head")

    @property
    def atoms(self) -> tf.Tensor:
        return self.head.atoms

    def call(self, inputs: Any) -> tf.Tensor:
        observation, action = inputs
        # Cast so a float64 NumPy batch cannot silently upcast the graph.
        features = tf.concat([tf.cast(observation, tf.float32),
                              tf.cast(action, tf.float32)], axis=-1)
        return self.head(self._torso(features))

    def mean(self, logits: tf.Tensor) -> tf.Tensor:
        """logits [B, N] -> Q values [B]."""
        return self.head.mean(logits)


def make_critic_network(num_atoms: int, layer_sizes: Sequence[int],
                        v_min: float = -150.0, v_max: float = 150.0,
                        init_mode: str = "fan_out", precision: str = "fp32") -> CriticNetwork:
    """Distributional critic taking ``(obs, action)``; see ``CriticNetwork``."""
    return CriticNetwork(num_atoms, layer_sizes, v_min, v_max, init_mode=init_mode, precision=precision)


def make_networks(environment_spec: Any, config: Any, precision: str = "fp32") -> Dict[str, tf.keras.Model]:
    """D4PG's ``{"policy", "critic"}`` for ``config`` (a ``D4PGConfig``) in resolved ``precision``, variables built."""
    obs_size = int(np.prod(environment_spec.observations.shape))
    action_size = int(np.prod(environment_spec.actions.shape))
    policy = make_policy_network(action_size, config.policy_layer_sizes, config.torso_init, precision)
    critic = make_critic_network(config.num_atoms, config.critic_layer_sizes, config.v_min, config.v_max,
                                 config.torso_init, precision)
    # Build every variable now, not lazily inside the first traced step.
    obs, act = tf.zeros((1, obs_size)), tf.zeros((1, action_size))
    policy(obs)
    critic((obs, act))
    return {"policy": policy, "critic": critic}


def policy_template(environment_spec: Any, layer_sizes: Sequence[int]) -> List[Dict[str, Any]]:
    """A fresh policy's NumPy op list (``rlplat.utils.numpy_layers``), for a ``GaussianActor`` without a config.

    The op order and activations are the network's own; the actor replaces
    the weights on every pull.
    """
    from rlplat.utils import numpy_layers  # pylint: disable=g-import-not-at-top

    policy = make_policy_network(int(np.prod(environment_spec.actions.shape)), layer_sizes)
    policy(tf.zeros((1, int(np.prod(environment_spec.observations.shape)))))
    return numpy_layers.export_layers(policy.layers)
