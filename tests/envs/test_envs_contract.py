"""dm_env contract tests (dm_env.test_utils.EnvironmentTestMixin) for every
wrapper, each around a real dm_control suite env, plus the full stack.

Short suite time limits make the 20-action sequence cross episode ends, so
the FIRST-after-LAST part of the contract is exercised too.
"""

from __future__ import annotations

import unittest

import numpy as np
from dm_env import test_utils

import rlplat_envs as envs  # sets MUJOCO_GL before dm_control is imported
from dm_control import suite as dm_suite

from rlplat_envs import (
    ActionRepeatWrapper,
    CanonicalActionWrapper,
    Float32Wrapper,
    FlattenObservationWrapper,
    StepLimitWrapper,
)


class _SuiteContract(test_utils.EnvironmentTestMixin):
    """Contract for `wrap(raw suite env)`; subclasses pick the env and wrapper.

    Not a TestCase itself, so pytest does not collect the abstract base.
    """

    domain, task, wrap = "cartpole", "swingup", staticmethod(lambda env: env)
    sim_seconds = 0.1  # cartpole: 10 control steps

    def make_object_under_test(self):
        raw = dm_suite.load(self.domain, self.task,
                            task_kwargs={"random": 0, "time_limit": self.sim_seconds})
        self._physics = raw.physics
        return self.wrap(raw)

    def make_action_sequence(self):
        rng = np.random.default_rng(0)
        spec = self.environment.action_spec()
        for _ in range(20):
            yield rng.uniform(spec.minimum, spec.maximum, spec.shape).astype(spec.dtype)

    def tearDown(self):
        super().tearDown()
        # Raw suite envs have a no-op close(); free their physics ourselves.
        if self._physics is not None:
            self._physics.free()

    def test_episode_end_is_reached(self):
        self.environment.reset()
        assert any(self.environment.step(a).last() for a in self.make_action_sequence())


class TestFloat32Contract(_SuiteContract, unittest.TestCase):
    domain, task, wrap = "walker", "walk", staticmethod(Float32Wrapper)


class TestFlattenContract(_SuiteContract, unittest.TestCase):
    domain, task, wrap = "walker", "walk", staticmethod(FlattenObservationWrapper)


class TestCanonicalContract(_SuiteContract, unittest.TestCase):
    domain, task, wrap = "quadruped", "walk", staticmethod(CanonicalActionWrapper)
    sim_seconds = 0.2


class TestActionRepeatContract(_SuiteContract, unittest.TestCase):
    wrap = staticmethod(lambda env: ActionRepeatWrapper(env, 3))


class TestStepLimitContract(_SuiteContract, unittest.TestCase):
    sim_seconds = 100.0  # the wrapper, not the suite, must end episodes
    wrap = staticmethod(lambda env: StepLimitWrapper(env, 6))


class TestFullStackContract(_SuiteContract, unittest.TestCase):
    sim_seconds = 100.0
    wrap = staticmethod(lambda env: Float32Wrapper(FlattenObservationWrapper(
        CanonicalActionWrapper(StepLimitWrapper(ActionRepeatWrapper(env, 2), 4)))))


class TestMakeEnvironmentContract(_SuiteContract, unittest.TestCase):
    """The object actors actually get: make_environment's own stack."""

    def make_object_under_test(self):
        self._physics = None  # make_environment's close() frees it
        return envs.make_environment("walker:walk", seed=0, action_repeat=2, time_limit=5)
