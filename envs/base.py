"""The base class every rlplat environment wrapper derives from."""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np

__all__ = ["EnvironmentWrapper", "UnknownEnvironmentError", "check_positive_int"]


class UnknownEnvironmentError(ValueError):
    """Raised for an environment name that is malformed or not registered.

    The message is a single line naming the closest valid names, so it reads
    well in CLI output and in Ray actor error summaries.
    """


def check_positive_int(value: Any, what: str) -> int:
    """Returns `value` as an int, or raises a one-line error naming `what`."""
    # bool is an int subclass; `True` as a repeat count is almost surely a bug.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    return int(value)


class EnvironmentWrapper(dm_env.Environment):
    """Base wrapper: forwards every call to the wrapped environment.

    Subclasses override only what they change. Unknown attributes (for example
    dm_control's `physics`) are looked up on the wrapped environment, so a stack
    of wrappers stays as inspectable as the bare environment.
    """

    def __init__(self, environment: dm_env.Environment):
        if not isinstance(environment, dm_env.Environment):
            raise TypeError(
                f"{type(self).__name__} wraps a dm_env.Environment, "
                f"got {type(environment).__name__}")
        self._environment = environment

    @property
    def environment(self) -> dm_env.Environment:
        """The directly wrapped environment."""
        return self._environment

    def __getattr__(self, name: str) -> Any:
        # Guard: during unpickling or a failed __init__ `_environment` may not
        # exist yet, and forwarding would recurse forever.
        if name == "_environment":
            raise AttributeError(name)
        return getattr(self._environment, name)

    def reset(self) -> dm_env.TimeStep:
        return self._environment.reset()

    def step(self, action) -> dm_env.TimeStep:
        return self._environment.step(action)

    def observation_spec(self):
        return self._environment.observation_spec()

    def action_spec(self):
        return self._environment.action_spec()

    def reward_spec(self):
        return self._environment.reward_spec()

    def discount_spec(self):
        return self._environment.discount_spec()

    def close(self) -> None:
        self._environment.close()
