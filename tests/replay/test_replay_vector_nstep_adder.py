"""VectorNStepAdder writes, stream by stream, exactly the items of K separate NStepTransitionAdders.

Both write to queue tables of a real Reverb server. The reference is K
``NStepTransitionAdder``s; the vector adder gets the same steps as one call
per round. Every observation carries its stream and step number, so each
stream's items can be picked out of the merged queue and compared in order,
bit for bit. The schedule mixes terminations, truncations, environment
discounts inside episodes, episodes abandoned without a LAST step, and
rounds in which only the first M < K streams step.
"""

from __future__ import annotations

import dm_env
import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlplat import replay
from rlplat.replay.packing import TransitionPacking
from rlplat.replay.vector_nstep_adder import VectorNStepAdder

K, N_STEP, GAMMA, OBS, ACT = 4, 3, 0.9, 4, 2
PACKING = TransitionPacking.from_specs(tf.TensorSpec((OBS,), tf.float32), tf.TensorSpec((ACT,), tf.float32))


@pytest.fixture(scope="module")
def address():
    server = replay.make_server([replay.make_queue_table(name, 100_000, PACKING.table_signature)
                                 for name in ("separate", "vector", "ended")])
    yield f"127.0.0.1:{server.port}"
    server.stop()


def _queue(address, table):
    client = reverb.Client(address)
    size = client.server_info(timeout=5)[table].current_size
    if not size:
        return np.zeros((0, PACKING.size), np.float32)
    return np.stack([np.asarray(s.data[0]) for s in client.sample(table, num_samples=size, emit_timesteps=False)])


def _schedule(rounds, seed):
    """Per round: (M, [per stream k < M: ("first", timestep) or ("step", action, timestep)])."""
    rng = np.random.default_rng(seed)
    step = np.zeros(K, np.int64)
    in_episode = np.zeros(K, bool)

    def observation(k):
        step[k] += 1
        return np.concatenate([[k, step[k]], rng.normal(size=OBS - 2)])  # float64, as environments give

    plan = []
    for _ in range(rounds):
        m = K if rng.random() < 0.8 else int(rng.integers(1, K))
        events = []
        for k in range(m):
            if not in_episode[k] or rng.random() < 0.01:  # a new episode, sometimes abandoning one
                events.append(("first", dm_env.restart(observation(k))))
                in_episode[k] = True
            action = rng.uniform(-1, 1, ACT)
            reward = float(rng.normal())
            if rng.random() < 0.05:  # the episode ends: terminated or truncated
                discount = 0.0 if rng.random() < 0.5 else 1.0
                timestep = dm_env.TimeStep(dm_env.StepType.LAST, reward, discount, observation(k))
                in_episode[k] = False
            else:
                discount = 0.5 if rng.random() < 0.1 else 1.0
                timestep = dm_env.transition(reward, observation(k), discount)
            events.append(("step", action, timestep))
        plan.append((m, events))
    return plan


def _run_separate(address, plan):
    client = reverb.Client(address)
    adders = [replay.NStepTransitionAdder(client, "separate", N_STEP, GAMMA, packing=PACKING) for _ in range(K)]
    for _, events in plan:
        k = 0
        for event in events:
            if event[0] == "first":
                adders[k].add_first(event[1])
            else:
                adders[k].add(event[1], event[2])
                k += 1
    for adder in adders:
        adder.close()
    return sum(adder.num_items for adder in adders)


def _run_vector(address, plan):
    adder = VectorNStepAdder(reverb.Client(address), "vector", N_STEP, GAMMA, K, packing=PACKING)
    for m, events in plan:
        actions, timesteps, k = [], [], 0
        for event in events:
            if event[0] == "first":
                adder.add_first(k, event[1])
            else:
                actions.append(event[1])
                timesteps.append(event[2])
                k += 1
        assert len(timesteps) == m
        adder.add(np.stack(actions), timesteps)
    adder.close()
    return adder.num_items


def test_each_stream_gets_exactly_the_items_of_its_own_adder(address):
    plan = _schedule(400, seed=3)
    separate_items = _run_separate(address, plan)
    vector_items = _run_vector(address, plan)
    separate, vector = _queue(address, "separate"), _queue(address, "vector")
    assert separate_items == vector_items == len(separate) == len(vector) > 1000
    unpacked = PACKING.unpack_numpy(vector)
    assert (unpacked.discount == 0).sum() > 10 and ((unpacked.discount > 0) & (unpacked.discount < 0.5)).sum() > 10
    for k in range(K):
        mine = vector[vector[:, 0] == k]
        assert len(mine) > 100
        # Same items in the same order, every bit (returns summed in float64 as the single adder does).
        np.testing.assert_array_equal(mine, separate[separate[:, 0] == k])


def test_an_episode_end_confirms_every_item_written_so_far(address):
    # The streams share one writer; an episode end flushes it, as the single
    # adder's episode end does, so a finished episode is in the table at once.
    client = reverb.Client(address)
    adder = VectorNStepAdder(client, "ended", N_STEP, GAMMA, K, packing=PACKING)
    for k in range(K):
        adder.add_first(k, dm_env.restart(np.full(OBS, k, np.float64)))
    step = [dm_env.transition(1.0, np.ones(OBS)) for _ in range(K)]
    for _ in range(5):  # 5 - N_STEP + 1 = 3 items per stream, under the flush period
        adder.add(np.zeros((K, ACT)), step)
    last = list(step)
    last[2] = dm_env.termination(1.0, np.ones(OBS))
    adder.add(np.zeros((K, ACT)), last)
    # 4 per stream from the windows, plus stream 2's tail of N_STEP - 1.
    assert adder.num_items == 4 * K + N_STEP - 1
    assert client.server_info(timeout=5)["ended"].current_size == adder.num_items
    adder.close()


def test_misuse_is_refused_with_the_fix(address):
    adder = VectorNStepAdder(reverb.Client(address), "vector", N_STEP, GAMMA, 2, packing=PACKING)
    adder.add_first(0, dm_env.restart(np.zeros(OBS)))
    with pytest.raises(RuntimeError, match="before add_first.. for stream 1"):
        adder.add(np.zeros((2, ACT)), [dm_env.transition(0.0, np.zeros(OBS))] * 2)
    adder.close()
    nested = TransitionPacking.from_specs({"a": tf.TensorSpec((OBS,), tf.float32)}, tf.TensorSpec((ACT,), tf.float32))
    with pytest.raises(ValueError, match="use one NStepTransitionAdder per environment"):
        VectorNStepAdder(reverb.Client(address), "vector", N_STEP, GAMMA, 2, packing=nested)
    other = TransitionPacking.from_specs(tf.TensorSpec((OBS + 1,), tf.float32), tf.TensorSpec((ACT,), tf.float32))
    with pytest.raises(ValueError, match="does not hold packed transitions"):
        VectorNStepAdder(reverb.Client(address), "vector", N_STEP, GAMMA, 2, packing=other)
