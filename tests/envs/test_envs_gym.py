"""The gymnasium adapter: dm_env contract, episode-end discounts, seeding, names."""

from __future__ import annotations

import unittest

import dm_env
import numpy as np
import pytest
from dm_env import specs, test_utils

import rlplat_envs as envs
from rlplat_envs import gym_adapter


class TestCartPoleContract(test_utils.EnvironmentTestMixin, unittest.TestCase):
    """dm_env's contract on gym:CartPole-v1; a 5-step limit makes the 20 actions cross episodes."""

    def make_object_under_test(self):
        return envs.make_environment("gym:CartPole-v1", seed=0, time_limit=5)

    def make_action_sequence(self):
        for i in range(20):
            yield np.int32(i % 2)


class TestPendulumContract(test_utils.EnvironmentTestMixin, unittest.TestCase):
    """Continuous actions, rescaled to [-1, 1]."""

    def make_object_under_test(self):
        return envs.make_environment("gym:Pendulum-v1", seed=0, time_limit=4)

    def make_action_sequence(self):
        rng = np.random.default_rng(0)
        for _ in range(20):
            yield rng.uniform(-1, 1, (1,)).astype(np.float32)


def test_cartpole_specs_are_discrete_and_float32():
    with envs.make_environment("gym:CartPole-v1", seed=0) as env:
        spec = env.action_spec()
        assert isinstance(spec, specs.DiscreteArray) and spec.num_values == 2
        assert env.observation_spec().shape == (4,) and env.observation_spec().dtype == np.float32
        ts = env.reset()
        assert ts.first() and ts.observation.dtype == np.float32
        ts = env.step(0)
        assert ts.reward.dtype == np.float32 and ts.discount.dtype == np.float32


def test_termination_has_discount_zero():
    # Always pushing right tips the pole over within ~10 steps: a termination.
    with envs.make_environment("gym:CartPole-v1", seed=1) as env:
        env.reset()
        for n in range(1, 100):  # noqa: B007  (n is read after the loop)
            ts = env.step(1)
            if ts.last():
                break
        assert ts.last() and ts.discount == 0.0 and n < 50
        assert env.step(1).first()  # dm_env: a step after LAST resets.


def test_truncation_has_discount_one_at_the_limit():
    # Alternating actions keep the pole up for 7 steps; the limit cuts at exactly 7.
    with envs.make_environment("gym:CartPole-v1", seed=0, time_limit=7) as env:
        env.reset()
        types = [env.step(i % 2) for i in range(7)]
        assert [t.step_type for t in types] == [dm_env.StepType.MID] * 6 + [dm_env.StepType.LAST]
        assert types[-1].discount == 1.0


def test_registered_limit_of_cartpole_v1_is_500_agent_steps_and_respects_action_repeat():
    with envs.make_environment("gym:CartPole-v1", seed=0, time_limit=6, action_repeat=2) as env:
        inner = env.environment.gym_env  # ActionRepeatWrapper -> GymAdapter
        env.reset()
        steps = 0
        while True:
            steps += 1
            if env.step(steps % 2).last():
                break
        # 6 agent steps of 2 env steps each, unless the pole fell first.
        assert steps <= 6 and inner.spec.max_episode_steps == 12


def _rollout(seed):
    with envs.make_environment("gym:CartPole-v1", seed=seed) as env:
        out = [env.reset().observation]
        for i in range(60):  # crosses at least one episode end (always-right falls fast)
            out.append(env.step(1 if i % 7 else 0).observation)
        return np.stack(out)


def test_seeding_is_reproducible_and_seed_dependent():
    np.testing.assert_array_equal(_rollout(3), _rollout(3))
    assert not np.array_equal(_rollout(3), _rollout(4))


def test_discrete_observations_are_one_hot():
    with envs.make_environment("gym:FrozenLake-v1", seed=0) as env:
        assert env.observation_spec().shape == (16,)
        obs = env.reset().observation
        np.testing.assert_array_equal(obs, np.eye(16, dtype=np.float32)[0])


@pytest.mark.parametrize("name, fragment", [
    ("gym:CartPole-v9", "did you mean: gym:CartPole-v1"),
    ("gym:NoSuchThing-v0", "no close match"),
])
def test_unknown_ids_fail_with_one_line(name, fragment):
    for call in (envs.make_environment, envs.suite.check_name):
        with pytest.raises(envs.UnknownEnvironmentError) as info:
            call(name)
        message = str(info.value)
        assert fragment in message and "\n" not in message and "rlplat envs" in message


def test_unsupported_spaces_are_rejected_with_one_line():
    with pytest.raises(ValueError, match="observation space .* not supported"):
        envs.make_environment("gym:Blackjack-v1")


def test_listing_has_cartpole_and_only_buildable_envs():
    names = gym_adapter.list_gym_tasks()
    assert "gym:CartPole-v1" in names and "gym:Acrobot-v1" in names
    assert "gym:Blackjack-v1" not in names
    assert all(n.startswith("gym:") for n in names)
