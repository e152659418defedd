"""EnvironmentLoop: exact step/episode counts across chunks, PhysicsError handling."""

import os

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np
import pytest
from dm_control.rl import control

from rlplat_envs import EnvironmentWrapper, make_environment
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


class BadActionAt(RecordingActor):
    """Sends ``bad`` as the action at the ``at``-th step of every episode (else random)."""

    def __init__(self, action_size, at, bad):
        super().__init__(action_size)
        self.at, self.bad, self.t = at, np.asarray(bad, np.float32), 0

    def observe_first(self, timestep):
        super().observe_first(timestep)
        self.t = 0

    def select_action(self, observation):
        self.t += 1
        return self.bad if self.t == self.at else super().select_action(observation)


def test_a_real_mujoco_physics_error_from_a_nan_control_is_a_termination(env):
    # MuJoCo itself flags the NaN control (mjWARN_BADCTRL); dm_control raises PhysicsError.
    actor = BadActionAt(1, at=3, bad=[np.nan])
    loop = EnvironmentLoop(env, actor)
    stats = loop.run_steps(9)
    assert stats["physics_errors"] == 3 and stats["env_errors"] == 0
    assert stats["episode_lengths"] == [3, 3, 3]
    assert actor.observed[2].last() and actor.observed[2].discount == 0.0


def test_other_environment_errors_end_the_episode_log_one_traceback_per_type_and_carry_on(env):
    # A wrong action shape: dm_control raises ValueError from inside step().
    actor = BadActionAt(1, at=2, bad=[0.5, 0.5])
    loop = EnvironmentLoop(env, actor, max_env_errors=10)
    first = loop.run_steps(6)
    assert first["env_errors"] == 3 and first["physics_errors"] == 0
    assert first["episode_lengths"] == [2, 2, 2]
    last = actor.observed[1]
    assert last.last() and last.discount == 0.0 and last.reward == 0.0
    [text] = first["env_error_tracebacks"]  # once, however often it happened
    assert "environment step raised ValueError" in text and "Traceback" in text
    assert "shape" in text
    second = loop.run_steps(6)
    assert second["env_errors"] == 3 and second["env_error_tracebacks"] == []
    assert loop.total_env_errors == 6


def test_past_max_env_errors_the_loop_raises(env):
    from rlplat.environment_loop import EnvironmentFailedError

    loop = EnvironmentLoop(env, BadActionAt(1, at=1, bad=[0.5, 0.5]), max_env_errors=4)
    loop.run_steps(4)
    with pytest.raises(EnvironmentFailedError, match="raised 5 times .*max_env_errors=4.*ValueError"):
        loop.run_steps(4)


class ResetFailsOnce(EnvironmentWrapper):
    def __init__(self, env):
        super().__init__(env)
        self.resets = 0

    def reset(self):
        self.resets += 1
        if self.resets == 1:
            raise RuntimeError("flaky reset")
        return super().reset()


def test_a_failed_reset_is_counted_and_retried(env):
    actor = RecordingActor(1)
    wrapped = ResetFailsOnce(env)
    stats = EnvironmentLoop(wrapped, actor).run_steps(10)
    assert stats["env_errors"] == 1 and stats["episodes"] == 1 and wrapped.resets == 2
    assert "environment reset raised RuntimeError" in stats["env_error_tracebacks"][0]
    assert actor.firsts == 1 and len(actor.observed) == 10
