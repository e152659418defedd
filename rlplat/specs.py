"""EnvironmentSpec: the four specs of a dm_env, in one picklable value."""

from __future__ import annotations

from typing import Any, NamedTuple

import dm_env


class EnvironmentSpec(NamedTuple):
    """What an agent needs to know about an environment to build itself."""

    observations: Any
    actions: Any
    rewards: Any
    discounts: Any


def make_environment_spec(environment: dm_env.Environment) -> EnvironmentSpec:
    """Reads the specs of `environment`."""
    return EnvironmentSpec(
        observations=environment.observation_spec(),
        actions=environment.action_spec(),
        rewards=environment.reward_spec(),
        discounts=environment.discount_spec(),
    )
