"""EnvironmentLoop: exact step/episode counts across chunks, PhysicsError handling."""

import os

os.environ.setdefault("MUJOCO_GL", "osmesa")

import dm_env
import numpy as np
import pytest
from dm_control.rl import control

from envs import EnvironmentWrapper, make_environment
from rlplat import core
from rlplat.environment_loop import EnvironmentLoop


class RecordingActor(core.Actor):
    """Random actions; records every call the loop makes."""

    def __init__(self, action_size):
        self.rng = np.random.default_rng(0)
        self.action_size = action_size
        self.firsts, self.observed, self.updates = 0, [], 0

    def select_action(self, observation):
        return self.rng.uniform(-1, 1, self.action_size).astype(np.float32)

    def observe_first(self, timestep):
        assert timestep.first()
        self.firsts += 1

    def observe(self, action, next_timestep):
        self.observed.append(next_timestep)

    def update(self, wait=False):
        self.updates += 1


class ExplodeAt(EnvironmentWrapper):
    """Raises dm_control's PhysicsError at the `at`-th step of every episode."""

    def __init__(self, env, at):
        super().__init__(env)
        self._at, self._t = at, 0

    def reset(self):
        self._t = 0
        return super().reset()

    def step(self, action):
        self._t += 1
        if self._t == self._at:
            raise control.PhysicsError("simulated divergence")
        return super().step(action)


@pytest.fixture
def env():
    environment = make_environment("cartpole:swingup", seed=0, time_limit=10)
    yield environment
    environment.close()


def test_counts_steps_and_episodes_exactly_across_chunks(env):
    actor = RecordingActor(1)
    seen = []
    loop = EnvironmentLoop(env, actor, counter_fn=seen.append)
    stats = loop.run_steps(35)
    assert (stats["env_steps"], stats["episodes"], stats["episode_lengths"]) == (35, 3, [10, 10, 10])
    assert actor.firsts == 4 and len(actor.observed) == 35 and actor.updates == 35
    stats = loop.run_steps(5)  # The 4th episode continues where the chunk cut it.
    assert (stats["episodes"], stats["episode_lengths"]) == (1, [10])
    assert (loop.total_steps, loop.total_episodes) == (40, 4)
    assert len(seen) == 2  # counter_fn: once per chunk, never per step.
    assert [t.last() for t in actor.observed].count(True) == 4
    for key in ("env_s", "policy_s", "observe_s", "update_s"):
        assert 0.0 <= stats[key] <= stats["wall_s"]
    assert sum(stats[k] for k in ("env_s", "policy_s", "observe_s", "update_s")) <= stats["wall_s"]


def test_run_episode_runs_one_fresh_episode(env):
    loop = EnvironmentLoop(env, RecordingActor(1))
    loop.run_steps(3)  # Abandoned by run_episode.
    result = loop.run_episode()
    assert result["episode_length"] == 10 and np.isfinite(result["episode_return"])
    assert not result["physics_error"]


def test_physics_error_ends_the_episode_as_a_termination_and_carries_on(env):
    actor = RecordingActor(1)
    loop = EnvironmentLoop(ExplodeAt(env, at=4), actor)
    stats = loop.run_steps(12)
    # Episodes of 4 steps: 3 good steps, then the error ends the episode.
    assert stats["physics_errors"] == 3 and stats["episodes"] == 3
    assert stats["episode_lengths"] == [4, 4, 4]
    last = actor.observed[3]
    assert last.last() and last.discount == 0.0 and last.reward == 0.0  # No bootstrap.
    np.testing.assert_array_equal(last.observation, actor.observed[2].observation)
    assert actor.firsts == 3 and loop.total_physics_errors == 3
