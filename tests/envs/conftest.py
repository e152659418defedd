"""Shared helpers for the envs tests: a tiny scripted dm_env for exact numbers."""

from __future__ import annotations

import collections

import dm_env
import numpy as np
import pytest
from dm_env import specs


class ScriptedEnv(dm_env.Environment):
    """A dm_env whose episode is a fixed script of rewards and discounts.

    Episode length is `len(rewards)`; the last step is LAST. Observations are
    derived from the spec (every leaf filled with the step index within the
    episode), so tests can tell steps apart. It follows the dm_env contract:
    `step()` on a fresh env or after LAST resets. Every action and reset is
    recorded so tests can count how often the inner env was driven.
    """

    def __init__(self, rewards, discounts=None, observation_spec=None, action_spec=None):
        self._rewards = list(rewards)
        self._discounts = list(discounts) if discounts is not None else [1.0] * len(rewards)
        assert len(self._discounts) == len(self._rewards)
        if observation_spec is None:
            observation_spec = specs.Array((2,), np.float64, "obs")
        if action_spec is None:
            action_spec = specs.BoundedArray((1,), np.float64, -1.0, 1.0)
        self._observation_spec = observation_spec
        self._action_spec = action_spec
        self._t = 0
        self._needs_reset = True
        self.actions = []
        self.num_resets = 0
        self.closed = False

    def _observation(self):
        def fill(spec):
            return np.full(spec.shape, self._t, dtype=spec.dtype)
        spec = self._observation_spec
        if isinstance(spec, collections.abc.Mapping):
            return type(spec)((k, fill(v)) for k, v in spec.items())
        return fill(spec)

    def reset(self):
        self._t = 0
        self._needs_reset = False
        self.num_resets += 1
        return dm_env.restart(self._observation())

    def step(self, action):
        if self._needs_reset:
            return self.reset()
        self.actions.append(np.array(action, copy=True))
        reward = self._rewards[self._t]
        discount = self._discounts[self._t]
        self._t += 1
        step_type = dm_env.StepType.MID
        if self._t == len(self._rewards):
            step_type = dm_env.StepType.LAST
            self._needs_reset = True
        return dm_env.TimeStep(step_type, reward, discount, self._observation())

    def observation_spec(self):
        return self._observation_spec

    def action_spec(self):
        return self._action_spec

    def reward_spec(self):
        return specs.Array((), np.float64, "reward")

    def discount_spec(self):
        return specs.BoundedArray((), np.float64, 0.0, 1.0, "discount")

    def close(self):
        self.closed = True


@pytest.fixture
def scripted_env():
    """Factory for ScriptedEnv (see its docstring)."""
    return ScriptedEnv
