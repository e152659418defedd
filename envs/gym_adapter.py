"""gymnasium environments behind the platform's `dm_env` interface: "gym:CartPole-v1".

`make_gym_environment("gym:CartPole-v1", seed=0)` builds the gymnasium env
and adapts it:

* actions: `Discrete(n)` -> `specs.DiscreteArray(n)` (int32 actions);
  `Box` -> a float32 `BoundedArray` (rescaled from [-1, 1] like the control
  suite when `canonical_actions` and the bounds are finite);
* observations: `Box` -> a flat float32 vector; `Discrete(n)` -> a one-hot
  float32 vector of length n;
* episode ends: `terminated` -> LAST with discount 0 (no bootstrap);
  `truncated` (gymnasium's TimeLimit) -> LAST with discount 1, the dm_env
  convention for a time limit. If both are set, termination wins.
* seeding: `seed` goes to the first `reset(seed=...)` and to the action
  space; later resets continue the env's own generator, so a seeded env
  replays the same sequence of episodes.

The adapter is one thin class (no wrapper stack on the hot path): CartPole's
own step costs ~7 us here, and every wrapper layer would add a few more.
"""

from __future__ import annotations

import difflib
from typing import Any, Optional

import dm_env
import numpy as np
from dm_env import specs

from rlplat_envs import wrappers
from rlplat_envs.base import UnknownEnvironmentError, check_positive_int

PREFIX = "gym:"
# Namespaces listed by `rlplat envs`: they need nothing beyond numpy. Other
# registered ids (box2d, mujoco) still build when their extras are installed.
_LISTED_ENTRY_POINTS = ("gymnasium.envs.classic_control.", "gymnasium.envs.toy_text.")


def _registry() -> dict:
    import gymnasium  # pylint: disable=g-import-not-at-top  (only when a gym env is asked for)

    return gymnasium.envs.registry


def is_gym_name(name: Any) -> bool:
    """True for names of the form "gym:<gymnasium id>"."""
    return isinstance(name, str) and name.startswith(PREFIX)


def check_name(name: str) -> str:
    """Validates "gym:<id>" against gymnasium's registry; returns the id.

    Raises:
      UnknownEnvironmentError: one line with the closest registered ids.
    """
    env_id = name[len(PREFIX):] if is_gym_name(name) else name
    registry = _registry()
    if env_id not in registry:
        close = difflib.get_close_matches(env_id, list(registry), n=5, cutoff=0.6)
        hint = (f"did you mean: {', '.join(PREFIX + c for c in close)}?" if close
                else "no close match")
        raise UnknownEnvironmentError(f"unknown gymnasium environment {name!r}; {hint} "
                           "(run 'rlplat envs' to list all)")
    return env_id


def list_gym_tasks() -> list[str]:
    """The "gym:<id>" names `rlplat envs` lists (numpy-only envs with supported spaces)."""
    import warnings  # pylint: disable=g-import-not-at-top

    names = []
    for env_id, entry in sorted(_registry().items()):
        point = entry.entry_point
        if isinstance(point, str) and point.startswith(_LISTED_ENTRY_POINTS):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # "CartPole-v0 is out of date", etc.
                    make_gym_environment(PREFIX + env_id).close()
            except ValueError:
                continue  # e.g. Blackjack's Tuple observations
            names.append(PREFIX + env_id)
    return names


def _observation_converter(space):
    import gymnasium  # pylint: disable=g-import-not-at-top

    if isinstance(space, gymnasium.spaces.Box):
        size = int(np.prod(space.shape))
        spec = specs.Array((size,), np.float32, "observation")
        return spec, lambda obs: np.asarray(obs, np.float32).reshape(size)
    if isinstance(space, gymnasium.spaces.Discrete):
        n, start = int(space.n), int(space.start)
        eye = np.eye(n, dtype=np.float32)
        return specs.Array((n,), np.float32, "observation"), lambda obs: eye[int(obs) - start].copy()
    return None, None


def _action_spec(space):
    import gymnasium  # pylint: disable=g-import-not-at-top

    if isinstance(space, gymnasium.spaces.Discrete):
        if int(space.start) != 0:
            return None
        return specs.DiscreteArray(int(space.n), dtype=np.int32, name="action")
    if isinstance(space, gymnasium.spaces.Box):
        return specs.BoundedArray(space.shape, np.float32, space.low.astype(np.float32),
                                  space.high.astype(np.float32), name="action")
    return None


class GymAdapter(dm_env.Environment):
    """A gymnasium `Env` as a `dm_env.Environment` (see the module docstring).

    Args:
      env: a gymnasium env (usually from `gymnasium.make`, with its TimeLimit).
      seed: seed of the first reset and of the action space; None is fresh entropy.
      name: for error messages.
    """

    def __init__(self, env, seed: Optional[int] = None, name: str = "gym env"):
        self._env = env
        self._name = name
        self._observation_spec, self._convert = _observation_converter(env.observation_space)
        if self._observation_spec is None:
            raise ValueError(f"{name}: observation space {env.observation_space} is not supported "
                             "(only Box and Discrete); pick another environment")
        self._action_spec = _action_spec(env.action_space)
        if self._action_spec is None:
            raise ValueError(f"{name}: action space {env.action_space} is not supported (only "
                             "Discrete starting at 0 and Box); pick another environment")
        self._discrete = isinstance(self._action_spec, specs.DiscreteArray)
        self._seed = seed
        if seed is not None:
            env.action_space.seed(int(seed))
        self._needs_reset = True
        self._reward_spec = specs.Array((), np.float32, "reward")
        self._discount_spec = specs.BoundedArray((), np.float32, 0.0, 1.0, "discount")
        self._zero, self._one = np.float32(0.0), np.float32(1.0)

    def reset(self) -> dm_env.TimeStep:
        seed, self._seed = self._seed, None  # Seed once; later resets continue its generator.
        obs, _ = self._env.reset(seed=seed)
        self._needs_reset = False
        return dm_env.TimeStep(dm_env.StepType.FIRST, None, None, self._convert(obs))

    def step(self, action) -> dm_env.TimeStep:
        if self._needs_reset:
            return self.reset()
        if self._discrete:
            action = int(action)
        else:
            action = np.asarray(action, np.float32).reshape(self._action_spec.shape)
        obs, reward, terminated, truncated, _ = self._env.step(action)
        reward = np.float32(reward)
        if terminated or truncated:
            self._needs_reset = True
            discount = self._zero if terminated else self._one
            return dm_env.TimeStep(dm_env.StepType.LAST, reward, discount, self._convert(obs))
        return dm_env.TimeStep(dm_env.StepType.MID, reward, self._one, self._convert(obs))

    def observation_spec(self):
        return self._observation_spec

    def action_spec(self):
        return self._action_spec

    def reward_spec(self):
        return self._reward_spec

    def discount_spec(self):
        return self._discount_spec

    @property
    def gym_env(self):
        """The adapted gymnasium env."""
        return self._env

    def close(self) -> None:
        self._env.close()


def make_gym_environment(
    name: str,
    *,
    seed: Optional[int] = None,
    action_repeat: int = 1,
    time_limit: Optional[int] = None,
    flatten: bool = True,
    canonical_actions: bool = True,
) -> dm_env.Environment:
    """Builds "gym:<id>" as a `dm_env.Environment` (same arguments as `make_environment`).

    Args:
      name: "gym:<gymnasium id>", e.g. "gym:CartPole-v1".
      seed: seed of the first reset (and the action space); None draws fresh entropy.
      action_repeat: env steps per agent step (rewards summed, discounts multiplied).
      time_limit: episode length in AGENT steps (after action repeat), replacing
        the env's registered limit; None keeps it (500 for CartPole-v1).
        Episodes cut by the limit end with discount 1 (truncation).
      flatten: accepted for symmetry; observations are always flat vectors.
      canonical_actions: for Box actions with finite bounds, expose [-1, 1].

    Raises:
      UnknownEnvironmentError: the id is not registered (one line, closest ids).
      ValueError: unsupported spaces, or bad numbers.
    """
    del flatten  # Always flat.
    env_id = check_name(name)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or seed < 0):
        raise ValueError(f"seed must be an int >= 0 or None, got {seed!r}")
    action_repeat = check_positive_int(action_repeat, "action_repeat")
    if time_limit is not None:
        time_limit = check_positive_int(time_limit, "time_limit")
    import gymnasium  # pylint: disable=g-import-not-at-top

    kwargs = {}
    if time_limit is not None:
        # The gym TimeLimit counts env steps; ours counts agent steps.
        kwargs["max_episode_steps"] = time_limit * action_repeat
    try:
        raw = gymnasium.make(env_id, **kwargs)
    except gymnasium.error.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"cannot build {name!r}: {first}") from None
    env: dm_env.Environment = GymAdapter(raw, seed=seed, name=name)
    try:
        if action_repeat > 1:
            env = wrappers.ActionRepeatWrapper(env, action_repeat)
        spec = env.action_spec()
        if (canonical_actions and not isinstance(spec, specs.DiscreteArray)
                and np.all(np.isfinite(spec.minimum)) and np.all(np.isfinite(spec.maximum))):
            env = wrappers.CanonicalActionWrapper(env)
    except BaseException:
        env.close()
        raise
    return env
