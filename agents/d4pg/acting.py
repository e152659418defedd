"""The D4PG actor: a NumPy policy plus Gaussian exploration noise.

TensorFlow never runs per step here: at batch 1 a tf.function call costs
~450 us against ~20-35 us for the same MLP in NumPy (measured on the
project's 2-core CPUs), so
the actor runs the learner's policy weights in NumPy
(``rlplat.utils.numpy_layers``: the op list is read from the Keras policy's
own layers, so the two cannot drift).

Weights are pulled from a ``VariableSource`` before the first action (a
blocking wait with a timeout: no random policy ever acts, also after a
restore) and then every ``variable_update_period`` observed steps.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import dm_env
import numpy as np

from rlplat import core
from rlplat.utils import numpy_layers

_ONE = np.float32(1.0)


def policy_template(environment_spec: Any, layer_sizes: Sequence[int]) -> List[Dict[str, Any]]:
    """The policy's NumPy op list (with initial weights), for ``D4PGActor``.

    Built once from a fresh Keras policy so the op order and activations are
    the network's own; the weights are replaced on every pull.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top  (only here)

    from rlplat_agents.d4pg import networks  # pylint: disable=g-import-not-at-top

    obs_size = int(np.prod(environment_spec.observations.shape))
    action_size = int(np.prod(environment_spec.actions.shape))
    policy = networks.make_policy_network(action_size, layer_sizes)
    policy(tf.zeros((1, obs_size)))
    return numpy_layers.export_layers(policy.layers)


class D4PGActor(core.PullingActor):
    """Deterministic policy + N(0, sigma^2) noise, clipped to [-1, 1].

    ``evaluation=True`` acts greedily (no noise) and needs no adder.
    """

    def __init__(self,
                 template: List[Dict[str, Any]],
                 variable_source: core.VariableSource,
                 adder: Any = None,
                 *,
                 sigma: float = 0.3,
                 seed: Optional[int] = None,
                 evaluation: bool = False,
                 variable_update_period: int = 1000,
                 wait_timeout_s: float = 120.0):
        """Creates the actor (weights are pulled lazily, before the first action).

        Args:
          template: ``policy_template(...)`` of the learner's config.
          variable_source: serves ``get_variables(["policy"])``.
          adder: receives ``add_first``/``add``; None records nothing.
          sigma: exploration noise std in the [-1, 1] action space.
          seed: seeds the noise.
          evaluation: act greedily.
          variable_update_period: observed steps between weight pulls.
          wait_timeout_s: how long the first pull may wait for weights.
        """
        if sigma < 0:
            raise ValueError(f"sigma must be >= 0 (got {sigma})")
        super().__init__(variable_source, variable_update_period, wait_timeout_s)
        self._policy = numpy_layers.NumpyForward(template)
        self._adder = adder
        self._sigma = 0.0 if evaluation else float(sigma)
        self._rng = np.random.default_rng(seed)
        self._noise = np.zeros((0,) + (self._policy.output_size,), np.float32)
        self._noise_index = 0

    @property
    def sigma(self) -> float:
        return self._sigma

    def select_action(self, observation: np.ndarray) -> np.ndarray:
        if self._version < 0:
            self.update(wait=True)
        return self._explore(self._policy(observation))  # A fresh float32 array: safe to modify.

    # ``rlplat.vector_loop.BatchActing``: K environments, one policy call.
    def policy_outputs(self, observations: np.ndarray) -> np.ndarray:
        """The policy's actions [K, A] for observations [K, O] (before noise)."""
        if self._version < 0:
            self.update(wait=True)
        return self._policy.batch(observations)[0]

    def finish_action(self, output: np.ndarray, policy_version: int) -> np.ndarray:
        """This actor's noise on one row of ``policy_outputs``, clipped (as ``select_action``)."""
        del policy_version  # D4PG records no behaviour-policy data
        return self._explore(np.array(output, np.float32))

    def _explore(self, action: np.ndarray) -> np.ndarray:
        if self._sigma > 0.0:
            action += self._next_noise()
        # In-place min/max: np.clip costs ~2 us on a tiny array, this ~1 us.
        np.minimum(action, _ONE, out=action)
        np.maximum(action, -_ONE, out=action)
        return action

    def _next_noise(self) -> np.ndarray:
        # Drawing noise 1024 steps at a time: one Generator call per step
        # costs about as much as a small layer of the policy.
        if self._noise_index >= len(self._noise):
            self._noise = self._rng.normal(
                0.0, self._sigma, (1024,) + (self._policy.output_size,)).astype(np.float32)
            self._noise_index = 0
        noise = self._noise[self._noise_index]
        self._noise_index += 1
        return noise

    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        if self._adder is not None:
            self._adder.add_first(timestep)

    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None:
        if self._adder is not None:
            self._adder.add(action, next_timestep)
        self._count_step()

    def _load_policy(self, arrays) -> None:
        self._policy.load(arrays)
