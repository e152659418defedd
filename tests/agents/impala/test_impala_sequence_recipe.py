"""End to end: SequenceAdder items + the documented learner recipe -> V-trace.

Pins the convention the actor and learner share: a truncated episode
bootstraps from V(its final observation), a terminated one does not, and the
padding after an episode end never reaches a target.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dm_env
import numpy as np
import pytest
import reverb
from dm_env import specs

from rlplat.losses.vtrace import vtrace
from rlplat import replay
from rlplat.replay.sequence_adder import SequenceAdder
from rlplat.replay.sequence_signature import as_sequence_step, sequence_signature

T, GAMMA = 4, 0.9
SIGNATURE = sequence_signature(specs.Array((2,), np.float32), specs.DiscreteArray(3), (), T)


def value(observation):
    # Nonzero at the zero padding observation, so leaked padding would show.
    return 0.5 * observation[..., 0] + 1.0


@pytest.fixture(scope="module")
def client():
    srv = replay.make_server([replay.make_queue_table("unrolls", 100, SIGNATURE)])
    yield reverb.Client(f"localhost:{srv.port}")
    srv.stop()


@pytest.mark.parametrize("last_discount", [0.0, 1.0], ids=["terminated", "truncated"])
def test_recipe_targets_are_n_step_returns_within_the_episode(client, last_discount):
    # 6 transitions -> unrolls [0..4] and [4, 5, final obs, pad, pad].
    rewards = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    observations = [np.array([10.0 + k, 0.0], np.float32) for k in range(7)]
    with SequenceAdder(client, "unrolls", T) as adder:
        adder.add_first(dm_env.restart(observations[0]))
        for k, r in enumerate(rewards):
            last = k == len(rewards) - 1
            ts = dm_env.TimeStep(dm_env.StepType.LAST if last else dm_env.StepType.MID, r,
                                 last_discount if last else 1.0, observations[k + 1])
            adder.add(k % 3, ts, extras=(), behaviour_log_prob=-1.1, policy_version=3)
    samples = client.sample("unrolls", num_samples=2, emit_timesteps=False,
                            unpack_as_table_signature=True)
    items = [as_sequence_step(s.data) for s in samples]
    time_major = lambda field: np.stack([getattr(i, field) for i in items], axis=1)  # noqa: E731

    # The recipe (sequence_adder module docstring), on-policy: log_pi == behaviour.
    values = value(time_major("observation"))  # [T+1, B]
    mask = time_major("mask")
    out = vtrace(values[:-1], values[1:], time_major("reward")[:-1],
                 GAMMA * time_major("discount")[:-1], np.zeros((T, 2), np.float32),
                 mask_t=mask[:-1])
    vs = out.vs.numpy()

    def n_step(ks, bootstrap):
        return [sum(GAMMA ** (j - s) * rewards[j] for j in ks if j >= s)
                + GAMMA ** (ks[-1] + 1 - s) * bootstrap for s in ks]

    np.testing.assert_allclose(vs[:, 0], n_step([0, 1, 2, 3], value(observations[4])), rtol=1e-6)
    final = last_discount * value(observations[6])  # V(final obs) only if truncated
    np.testing.assert_allclose(vs[:2, 1], n_step([4, 5], final), rtol=1e-6)
    np.testing.assert_array_equal(out.pg_advantages.numpy()[2:, 1], 0.0)  # padding
