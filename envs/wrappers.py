"""Small composable `dm_env.Environment` wrappers.

Every wrapper validates its arguments when it is built, so a misconfigured
pipeline fails at construction time with a one-line message rather than deep
inside an actor loop. They only depend on `dm_env`, `dm-tree` and numpy, so
they can be used with any dm_env environment, not only dm_control ones.
"""

from __future__ import annotations

from collections.abc import Mapping

import dm_env
import numpy as np
import tree
from dm_env import specs

from rlplat_envs.base import EnvironmentWrapper, check_positive_int

__all__ = [
    "EnvironmentWrapper",
    "Float32Wrapper",
    "FlattenObservationWrapper",
    "CanonicalActionWrapper",
    "ActionRepeatWrapper",
    "StepLimitWrapper",
]


# --------------------------------------------------------------------------
# dtype


def _to_float32_spec(spec):
    if isinstance(spec, specs.Array) and np.issubdtype(spec.dtype, np.floating):
        return spec.replace(dtype=np.float32)
    return spec


def _to_float32_value(value):
    if value is None:
        return None
    array = np.asarray(value)
    if np.issubdtype(array.dtype, np.floating):
        return array.astype(np.float32)
    return value


class Float32Wrapper(EnvironmentWrapper):
    """Casts floating-point observations, rewards and discounts to float32.

    Integer and boolean leaves (e.g. uint8 pixels) are left alone: casting them
    would quadruple their size for no numerical benefit. Specs are converted
    the same way, so values always validate against the reported specs.
    """

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        self._observation_spec = tree.map_structure(
            _to_float32_spec, environment.observation_spec())
        self._reward_spec = tree.map_structure(_to_float32_spec, environment.reward_spec())
        self._discount_spec = tree.map_structure(
            _to_float32_spec, environment.discount_spec())

    def _convert(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
        return timestep._replace(
            observation=tree.map_structure(_to_float32_value, timestep.observation),
            # FIRST steps carry reward/discount None; dm-tree treats None as a
            # leaf and _to_float32_value passes it through.
            reward=tree.map_structure(_to_float32_value, timestep.reward),
            discount=tree.map_structure(_to_float32_value, timestep.discount),
        )

    def reset(self) -> dm_env.TimeStep:
        return self._convert(self._environment.reset())

    def step(self, action) -> dm_env.TimeStep:
        return self._convert(self._environment.step(action))

    def observation_spec(self):
        return self._observation_spec

    def reward_spec(self):
        return self._reward_spec

    def discount_spec(self):
        return self._discount_spec


# --------------------------------------------------------------------------
# observations


class FlattenObservationWrapper(EnvironmentWrapper):
    """Concatenates a dict of observations into one flat float32 vector.

    Keys are taken in SORTED order, not the spec's insertion order. Sorting is
    the order `dm-tree` and `tf.nest` use to flatten dicts, so a slice of the
    flat vector lines up with `tree.flatten(observation)` anywhere else in the
    platform, and it does not depend on how an environment happened to build
    its OrderedDict. Each entry is raveled in C order; scalars become length 1.
    `layout` maps each key to its slice of the flat vector.

    A single (non-dict) array observation is simply raveled.
    """

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        spec = environment.observation_spec()
        if isinstance(spec, specs.Array):
            self._keys = None
            named = {spec.name or "observation": spec}
        elif isinstance(spec, Mapping) and spec:
            self._keys = sorted(spec)
            named = {key: spec[key] for key in self._keys}
        else:
            raise TypeError(
                "FlattenObservationWrapper needs an Array or a non-empty dict of Arrays "
                f"as observation spec, got {type(spec).__name__}")
        self.layout: dict[str, slice] = {}
        offset = 0
        for key, leaf in named.items():
            if not isinstance(leaf, specs.Array):
                raise TypeError(
                    f"observation {key!r} has spec {type(leaf).__name__}; nested "
                    "observations are not supported, only a flat dict of Arrays")
            if not np.issubdtype(leaf.dtype, np.number) and leaf.dtype != np.bool_:
                raise TypeError(f"observation {key!r} has non-numeric dtype {leaf.dtype}")
            size = int(np.prod(leaf.shape, dtype=np.int64))
            self.layout[key] = slice(offset, offset + size)
            offset += size
        self._size = offset
        self._observation_spec = specs.Array(
            shape=(offset,), dtype=np.float32, name="observations")

    def _flatten(self, observation) -> np.ndarray:
        if self._keys is None:
            parts = [observation]
        else:
            parts = [observation[key] for key in self._keys]
        flat = np.concatenate(
            [np.asarray(part, dtype=np.float32).reshape(-1) for part in parts])
        if flat.shape[0] != self._size:
            # An environment whose values disagree with its own spec would
            # otherwise silently shift every later feature.
            raise ValueError(
                f"flattened observation has {flat.shape[0]} values, spec says {self._size}")
        return flat

    def reset(self) -> dm_env.TimeStep:
        timestep = self._environment.reset()
        return timestep._replace(observation=self._flatten(timestep.observation))

    def step(self, action) -> dm_env.TimeStep:
        timestep = self._environment.step(action)
        return timestep._replace(observation=self._flatten(timestep.observation))

    def observation_spec(self):
        return self._observation_spec


# --------------------------------------------------------------------------
# actions


class CanonicalActionWrapper(EnvironmentWrapper):
    """Lets the agent act in [-1, 1] and rescales to the environment's bounds.

    The agent-facing action spec is a float32 `BoundedArray` in [-1, 1] of the
    same shape. Out-of-range inputs are clipped before rescaling (a tanh policy
    plus exploration noise routinely overshoots) and the result is cast to the
    environment's own action dtype. Bounds must be finite: an unbounded
    dimension has no range to map onto.
    """

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        spec = environment.action_spec()
        if not isinstance(spec, specs.BoundedArray):
            raise TypeError(
                "CanonicalActionWrapper needs a single BoundedArray action spec, "
                f"got {type(spec).__name__}")
        if not np.issubdtype(spec.dtype, np.floating):
            raise TypeError(f"CanonicalActionWrapper needs float actions, got dtype {spec.dtype}")
        minimum = np.broadcast_to(np.asarray(spec.minimum, np.float64), spec.shape)
        maximum = np.broadcast_to(np.asarray(spec.maximum, np.float64), spec.shape)
        if not (np.all(np.isfinite(minimum)) and np.all(np.isfinite(maximum))):
            raise ValueError("CanonicalActionWrapper needs finite action bounds, got "
                             f"minimum={spec.minimum}, maximum={spec.maximum}")
        self._inner_spec = spec
        self._minimum = minimum
        self._half_range = 0.5 * (maximum - minimum)
        self._action_spec = specs.BoundedArray(
            shape=spec.shape, dtype=np.float32, minimum=-1.0, maximum=1.0,
            name=spec.name)

    def rescale(self, action) -> np.ndarray:
        """Maps a canonical action in [-1, 1] (clipped) to the environment's bounds."""
        action = np.asarray(action, dtype=np.float64)
        if action.shape != self._inner_spec.shape:
            raise ValueError(
                f"action has shape {action.shape}, expected {self._inner_spec.shape}")
        action = np.clip(action, -1.0, 1.0)
        scaled = self._minimum + (action + 1.0) * self._half_range
        return scaled.astype(self._inner_spec.dtype)

    def step(self, action) -> dm_env.TimeStep:
        return self._environment.step(self.rescale(action))

    def action_spec(self):
        return self._action_spec


# --------------------------------------------------------------------------
# time


class ActionRepeatWrapper(EnvironmentWrapper):
    """Repeats each action `num_repeats` times.

    Rewards are summed and discounts multiplied over the repeats; the returned
    observation is the last one. Repetition stops early when the episode ends,
    so a LAST step is never skipped over.
    """

    def __init__(self, environment: dm_env.Environment, num_repeats: int):
        super().__init__(environment)
        self._num_repeats = check_positive_int(num_repeats, "num_repeats")

    @property
    def num_repeats(self) -> int:
        """How many environment steps one agent step takes (at most)."""
        return self._num_repeats

    def step(self, action) -> dm_env.TimeStep:
        timestep = self._environment.step(action)
        # A FIRST step (fresh env, or auto-reset after LAST) consumed the action
        # as a reset; repeating it would silently start the episode early.
        if timestep.first():
            return timestep
        reward, discount = timestep.reward, timestep.discount
        for _ in range(self._num_repeats - 1):
            if timestep.last():
                break
            timestep = self._environment.step(action)
            reward = reward + timestep.reward
            discount = discount * timestep.discount
        return timestep._replace(reward=reward, discount=discount)


class StepLimitWrapper(EnvironmentWrapper):
    """Truncates episodes after `max_steps` steps.

    A truncated episode ends with a LAST step whose discount is left as the
    environment gave it (1.0 for a live state), the dm_env convention that lets
    a learner bootstrap through time limits. Episodes that terminate on their
    own keep their discount (normally 0). The next `step()` after a LAST starts
    a new episode, as the dm_env contract requires.
    """

    def __init__(self, environment: dm_env.Environment, max_steps: int):
        super().__init__(environment)
        self._max_steps = check_positive_int(max_steps, "max_steps")
        self._steps = 0
        # Set after we truncate: the inner env does not know the episode ended,
        # so it would happily continue unless we reset it ourselves.
        self._reset_next_step = False

    @property
    def max_steps(self) -> int:
        """Maximum number of steps per episode."""
        return self._max_steps

    def reset(self) -> dm_env.TimeStep:
        self._steps = 0
        self._reset_next_step = False
        return self._environment.reset()

    def step(self, action) -> dm_env.TimeStep:
        if self._reset_next_step:
            return self.reset()
        timestep = self._environment.step(action)
        if timestep.first():
            self._steps = 0
            return timestep
        self._steps += 1
        if timestep.last():
            self._steps = 0
        elif self._steps >= self._max_steps:
            self._reset_next_step = True
            timestep = timestep._replace(step_type=dm_env.StepType.LAST)
        return timestep
