"""A NumPy deterministic policy plus Gaussian exploration noise: the actor of DPG agents (D4PG, DDPG).

TensorFlow never runs per step here: at batch 1 a tf.function call costs
an order of magnitude more than the same MLP in NumPy (docs/measurements.md),
so the actor runs the learner's policy weights in NumPy
(``rlplat.utils.numpy_layers``: the op list is read from the Keras policy's
own layers, so the two cannot drift). Any feed-forward Keras policy
whose actions lie in [-1, 1] (a tanh output) fits: an agent passes
``numpy_layers.export_layers(policy.layers)`` of a built policy as the
template and serves the same policy's variables as ``"policy"``.

Weights are pulled from a ``VariableSource`` before the first action (a
blocking wait with a timeout: no random policy ever acts, also after a
restore) and then every ``variable_update_period`` observed steps.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Sequence

import dm_env
import numpy as np

from rlplat import core
from rlplat.utils import numpy_layers
from rlplat.vector_loop import BlockedDraws

_ONE = np.float32(1.0)
# Noise rows drawn per Generator call: one call per step costs about as much
# as a small layer of the policy.
NOISE_BLOCK = 1024


def greedy_policy(policy: Any) -> Any:
    """``GaussianActor``'s greedy choice as TensorFlow ops: ``policy(obs)`` clipped to [-1, 1].

    For ``AgentBuilder.make_greedy_policy`` of DPG agents; ``policy`` is the
    restored Keras policy whose layers the actor runs in NumPy. The clip is the
    actor's own (a no-op after a tanh output, kept so the two cannot differ).
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top  (export only; actors never load TF)

    def act(observations: Any) -> Any:
        return tf.clip_by_value(policy(observations), -1.0, 1.0)

    return act


class GaussianActor(core.PullingActor):
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
          template: ``numpy_layers.export_layers`` of the learner's (built) policy.
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

    @classmethod
    def for_policy(cls, policy: Any, variable_source: core.VariableSource, adder: Any = None,
                   **kwargs: Any) -> "GaussianActor":
        """An actor running the layers of the built Keras ``policy`` (weights: the served ``policy.variables``)."""
        return cls(numpy_layers.export_layers(policy.layers), variable_source, adder, **kwargs)

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
        del policy_version  # DPG agents record no behaviour-policy data
        return self._explore(np.array(output, np.float32))

    def _explore(self, action: np.ndarray) -> np.ndarray:
        if self._sigma > 0.0:
            action += self._next_noise()
        # In-place min/max: np.clip costs ~2 us on a tiny array, this ~1 us.
        np.minimum(action, _ONE, out=action)
        np.maximum(action, -_ONE, out=action)
        return action

    def _next_noise(self) -> np.ndarray:
        if self._noise_index >= len(self._noise):
            self._noise = self._rng.normal(
                0.0, self._sigma, (NOISE_BLOCK, self._policy.output_size)).astype(np.float32)
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


class GaussianVectorActor(core.WeightPuller):
    """A ``rlplat.vector_loop.VectorActor``: K environments' ``GaussianActor``s as one object.

    One policy call for the K observations, the K noise rows added and clipped
    as one array, and one ``VectorNStepAdder.add`` per step, where K separate
    actors pay a Python call chain per environment. What each environment gets
    is unchanged: environment k's noise comes from its own generator
    (``np.random.default_rng(seeds[k])`` with std ``sigmas[k]``, drawn in blocks
    as a ``GaussianActor`` with that seed and sigma draws it), so its actions
    are that actor's, and its transitions go to its own stream of the adder.
    Weights are pulled as by one actor: before the first action, then every
    ``variable_update_period`` steps (of all K together).

    Args:
      template: ``numpy_layers.export_layers`` of the learner's (built) policy.
      variable_source: serves ``get_variables(["policy"])``.
      adder: a ``VectorNStepAdder`` with K streams, or None to record nothing.
      seeds: K seeds, one per environment.
      sigmas: K exploration stds (>= 0), one per environment.
      variable_update_period, wait_timeout_s: as for ``GaussianActor``.
    """

    def __init__(self, template: List[Dict[str, Any]], variable_source: core.VariableSource, adder: Any,
                 seeds: Sequence[int], sigmas: Sequence[float], *, variable_update_period: int = 1000,
                 wait_timeout_s: float = 120.0):
        super().__init__(variable_source, variable_update_period, wait_timeout_s)
        if len(sigmas) != len(seeds) or not seeds:
            raise ValueError(f"need one sigma per seed (got {len(sigmas)} sigmas, {len(seeds)} seeds)")
        if min(sigmas) < 0:
            raise ValueError(f"sigmas must be >= 0 (got {min(sigmas)})")
        if adder is not None and adder.num_streams != len(seeds):
            raise ValueError(f"the adder has {adder.num_streams} streams for {len(seeds)} environments")
        self._policy = numpy_layers.NumpyForward(template)
        self._adder = adder
        self._noise = BlockedDraws([functools.partial(self._noise_block, np.random.default_rng(seed), float(sigma))
                                    for seed, sigma in zip(seeds, sigmas)])
        self._num_environments = len(seeds)

    @classmethod
    def for_policy(cls, policy: Any, variable_source: core.VariableSource, adder: Any, seeds: Sequence[int],
                   sigmas: Sequence[float], **kwargs: Any) -> "GaussianVectorActor":
        """The vector actor running the layers of the built Keras ``policy`` (as ``GaussianActor.for_policy``)."""
        return cls(numpy_layers.export_layers(policy.layers), variable_source, adder, seeds, sigmas, **kwargs)

    @property
    def num_environments(self) -> int:
        return self._num_environments

    def observe_first(self, index: int, timestep: dm_env.TimeStep) -> None:
        if self._adder is not None:
            self._adder.add_first(index, timestep)

    def select_actions(self, observations: np.ndarray) -> np.ndarray:
        """Actions [M, A] for environments 0..M-1: each row as its own ``GaussianActor`` would act."""
        if self._version < 0:
            self.update(wait=True)
        actions = np.array(self._policy.batch(observations)[0], np.float32)
        actions += self._noise.take(len(actions))  # a sigma-0 environment's rows are zeros
        np.minimum(actions, _ONE, out=actions)
        np.maximum(actions, -_ONE, out=actions)
        return actions

    def observe(self, actions: Sequence[Any], timesteps: Sequence[dm_env.TimeStep]) -> None:
        if self._adder is not None:
            self._adder.add(actions, timesteps)
        self._count_step()

    def close(self) -> None:
        """Flushes and closes the adder."""
        if self._adder is not None:
            self._adder.close()

    def _noise_block(self, rng: np.random.Generator, sigma: float) -> np.ndarray:
        shape = (NOISE_BLOCK, self._policy.output_size)
        if not sigma > 0.0:  # GaussianActor draws nothing at sigma 0
            return np.zeros(shape, np.float32)
        return rng.normal(0.0, sigma, shape).astype(np.float32)

    def _load_policy(self, arrays) -> None:
        self._policy.load(arrays)
