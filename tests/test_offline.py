"""rlplat.offline: the in-memory input pipeline, episode recording, and run_offline's cadence and checkpoint."""

import dataclasses
import os
import subprocess
import sys

import dm_env
import numpy as np
import pytest
from dm_env import specs

from rlplat import core, offline, replication

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rows(n):
    return {"x": np.arange(n, dtype=np.float32)[:, None] * [1.0, -1.0], "i": np.arange(n, dtype=np.int64)}


def _global_batches(dataset, num_replicas, global_batch_size, num_steps, seed=0):
    """The rows of each global step's batch, replicas concatenated in order."""
    repl = replication.make_replicator(num_replicas)
    iterator = repl.distribute(offline.make_input_fn(dataset, global_batch_size, seed))
    out = []
    for _ in range(num_steps):
        parts = repl.strategy.experimental_local_results(next(iterator))
        out.append(np.concatenate([p["i"].numpy() for p in parts]))
        for p in parts:
            np.testing.assert_array_equal(p["x"].numpy(), dataset["x"][p["i"].numpy()])  # rows stay whole
    return out


def test_every_epoch_is_a_permutation_and_the_global_batches_do_not_depend_on_replicas():
    data = _rows(24)
    one = _global_batches(data, 1, 8, 9)
    two = _global_batches(data, 2, 8, 9)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    stream = np.concatenate(one)
    for epoch in range(3):
        assert sorted(stream[24 * epoch:24 * (epoch + 1)]) == list(range(24))
    assert not np.array_equal(stream[:24], stream[24:48])  # a new order every epoch
    assert not np.array_equal(stream[:24], np.concatenate(_global_batches(data, 1, 8, 3, seed=1)))


@pytest.mark.parametrize("dataset", [{}, {"x": np.zeros(3), "y": np.zeros(4)}, {"x": np.zeros((0, 2))}])
def test_a_data_set_needs_non_empty_arrays_of_one_length(dataset):
    with pytest.raises(ValueError, match="one length"):
        offline.make_input_fn(dataset, 4, 0)


class _Line(dm_env.Environment):
    """A 1-D walk of ``length`` steps: observation [t], reward = action."""

    def __init__(self, length=3):
        self._length, self._t = length, 0

    def reset(self):
        self._t = 0
        return dm_env.restart(np.array([0.0], np.float32))

    def step(self, action):
        self._t += 1
        observation, reward = np.array([self._t], np.float32), float(action[0])
        return dm_env.truncation(reward, observation) if self._t == self._length else dm_env.transition(
            reward, observation)

    def observation_spec(self):
        return specs.Array((1,), np.float32)

    def action_spec(self):
        return specs.BoundedArray((1,), np.float32, -1.0, 1.0)


class _Doubler(core.Actor):
    def select_action(self, observation):
        return np.asarray(observation, np.float32) * 0.5

    def observe_first(self, timestep):
        raise AssertionError("record_episodes tells the actor nothing")

    observe = update = observe_first


def test_record_episodes_keeps_each_step_and_the_returns():
    dataset, returns = offline.record_episodes(_Line(3), _Doubler(), 2)
    np.testing.assert_array_equal(dataset["observation"][:, 0], [0, 1, 2, 0, 1, 2])
    np.testing.assert_array_equal(dataset["action"][:, 0], [0, 0.5, 1, 0, 0.5, 1])
    assert returns == [1.5, 1.5]


def test_record_episodes_with_action_noise_steps_noised_clipped_actions_and_keeps_the_clean_ones():
    """_Line's reward is the executed action: the returns show what was stepped, the rows what was chosen."""
    dataset, returns = offline.record_episodes(_Line(3), _Doubler(), 2, action_noise=1.0, seed=1)
    np.testing.assert_array_equal(dataset["action"][:, 0], [0, 0.5, 1, 0, 0.5, 1])
    noise = np.random.default_rng(1).normal(0.0, 1.0, (6, 1))
    executed = np.clip(dataset["action"] + noise, -1.0, 1.0)[:, 0]
    np.testing.assert_allclose(returns, [executed[:3].sum(), executed[3:].sum()], rtol=1e-6)
    assert returns[0] != returns[1] and np.abs(executed).max() == 1.0  # noised per step, and clipped to the spec
    assert offline.record_episodes(_Line(3), _Doubler(), 2, action_noise=1.0, seed=1)[1] == returns


def test_record_episodes_refuses_negative_noise():
    with pytest.raises(ValueError, match="action_noise"):
        offline.record_episodes(_Line(3), _Doubler(), 1, action_noise=-0.1)


@pytest.mark.parametrize("changes, message", [
    (dict(num_learner_steps=0), "num_learner_steps"), (dict(eval_every=0), "eval_every"),
    (dict(eval_episodes=-1), "eval_episodes"), (dict(seed=1.5), "seed")])
def test_run_offline_refuses_bad_counts_before_making_anything(changes, message):
    def factory(seed):
        raise AssertionError("nothing is made for a bad count")

    with pytest.raises(ValueError, match=message):
        offline.run_offline(None, factory, **{"num_learner_steps": 10, **changes})


@pytest.mark.slow
def test_run_offline_evaluates_on_its_cadence_and_saves_the_learner(tmp_path):
    """A BC learner on made-up rows: evaluations land on call boundaries, the last at the end."""
    from rlplat_agents.bc.builder import BCBuilder
    from rlplat_agents.bc.config import BCConfig
    import rlplat_envs as envs

    @dataclasses.dataclass(frozen=True)
    class MadeUp(BCBuilder):
        def make_dataset(self, environment_factory, seed):
            rng = np.random.default_rng(seed)
            return {"observation": rng.normal(size=(64, 5)).astype(np.float32),
                    "action": rng.uniform(-1, 1, (64, 1)).astype(np.float32)}

    made = []

    def factory(seed):
        made.append(seed)
        return envs.make_environment("cartpole:balance", seed=seed, time_limit=20)

    builder = MadeUp(BCConfig(teacher_logdir="unused", layer_sizes=(8,), global_batch_size=16, steps_per_call=10))
    out = offline.run_offline(builder, factory, 25, eval_every=10, eval_episodes=2, seed=4,
                              checkpoint_dir=str(tmp_path))
    assert made == [5]  # evaluation only: this data set needs no environment
    assert out["learner_steps"] == 30 and out["dataset_size"] == 64
    assert [step for step, _ in out["evaluations"]] == [10, 20, 30]
    assert len(out["eval_returns"]) == 2 and out["evaluations"][-1][1] == np.mean(out["eval_returns"])
    assert np.isfinite(out["metrics"]["loss"]) and out["checkpoint"] == str(tmp_path / "ckpt-30")


def test_the_offline_runner_and_the_bc_builder_import_neither_ray_nor_tensorflow():
    code = ("import sys, rlplat.offline, agents.bc.builder; "
            "print(sorted(m for m in ('ray', 'tensorflow', 'reverb') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=REPO))
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr
