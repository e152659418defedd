"""rlplat environments: the dm_control suite behind a pure `dm_env` interface.

`make_environment("cartpole:swingup", seed=0)` builds any task from
`dm_control.suite.ALL_TASKS` with the platform's standard wrapper stack
(action repeat, step limit, canonical [-1, 1] actions, flat float32
observations). The wrappers are exported for building custom stacks.

This package deliberately imports neither TensorFlow, Ray nor Reverb, so
actors and tests can use it without pulling in the learner's dependencies.
"""

import os

# quadruped:escape uploads its random terrain to an OpenGL context on every
# reset, so even "headless" training needs a GL backend. MuJoCo's default
# (GLFW) needs a display; OSMesa renders in software anywhere. setdefault keeps
# an explicit choice (e.g. MUJOCO_GL=egl on GPU hosts). This only takes effect
# if it runs before the first dm_control import in the process.
os.environ.setdefault("MUJOCO_GL", "osmesa")

from rlplat_envs.suite import UnknownEnvironmentError, list_tasks, make_environment  # noqa: E402
from rlplat_envs.wrappers import (  # noqa: E402
    ActionRepeatWrapper,
    CanonicalActionWrapper,
    EnvironmentWrapper,
    Float32Wrapper,
    FlattenObservationWrapper,
    StepLimitWrapper,
)

__all__ = [
    "ActionRepeatWrapper",
    "CanonicalActionWrapper",
    "EnvironmentWrapper",
    "Float32Wrapper",
    "FlattenObservationWrapper",
    "StepLimitWrapper",
    "UnknownEnvironmentError",
    "list_gym_tasks",
    "list_tasks",
    "make_environment",
]


def list_gym_tasks() -> list:
    """The ``gym:<id>`` names ``make_environment`` accepts ([] without gymnasium)."""
    try:
        from rlplat_envs import gym_adapter  # pylint: disable=g-import-not-at-top  (imports gymnasium)
    except ImportError:
        return []
    return gym_adapter.list_gym_tasks()
