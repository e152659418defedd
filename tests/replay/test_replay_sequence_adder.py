"""SequenceAdder against a real in-process Reverb server (T = 4)."""

from __future__ import annotations

import threading
import time

import dm_env
import numpy as np
import pytest
import reverb
import tensorflow as tf
from dm_env import specs

from rlplat import replay
from rlplat.replay.sequence_adder import SequenceAdder
from rlplat.replay.sequence_signature import as_sequence_step, sequence_signature

T, OBS_DIM, NUM_ACTIONS = 4, 3, 2
SIGNATURE = sequence_signature(
    specs.Array((OBS_DIM,), np.float64),
    specs.DiscreteArray(NUM_ACTIONS),
    {"logits": specs.Array((NUM_ACTIONS,), np.float32)},
    T,
)


@pytest.fixture(scope="module")
def address():
    srv = replay.make_server([replay.make_queue_table("seq", 1000, SIGNATURE)])
    yield f"localhost:{srv.port}"
    srv.stop()


@pytest.fixture
def client(address):
    client = reverb.Client(address)
    drain(client)
    return client


def drain(client, table="seq"):
    """Pops every item of a queue table, in insertion order."""
    size = client.server_info(timeout=5)[table].current_size
    if not size:
        return []
    samples = client.sample(table, num_samples=size, emit_timesteps=False,
                            unpack_as_table_signature=True)
    return [as_sequence_step(s.data) for s in samples]


def obs(k):
    return np.full((OBS_DIM,), float(k))


def run_episode(adder, length, last_discount, first=0, version=lambda k: 7, end=True):
    """Step k: o_k = full(first + k), a_k = k % 2, r = 100 + first + k,
    logits = (k, -k), log_prob = -k / 10, policy_version = version(k)."""
    adder.add_first(dm_env.restart(obs(first)))
    for k in range(length):
        last = end and k == length - 1
        ts = dm_env.TimeStep(dm_env.StepType.LAST if last else dm_env.StepType.MID,
                             100.0 + first + k, last_discount if last else 1.0, obs(first + k + 1))
        adder.add(np.int64(k % 2), ts, extras={"logits": np.array([k, -k], np.float32)},
                  behaviour_log_prob=-k / 10, policy_version=version(k))


def check_steps(item, ks, first=0, version=lambda k: 7):
    """Real steps ks (episode indices) of ``item`` as ``run_episode`` wrote them."""
    n = len(ks)
    np.testing.assert_array_equal(item.observation[:n], [obs(first + k) for k in ks])
    np.testing.assert_array_equal(item.action[:n], [k % 2 for k in ks])
    np.testing.assert_array_equal(item.reward[:n], [100.0 + first + k for k in ks])
    np.testing.assert_array_equal(item.extras["logits"][:n], [[k, -k] for k in ks])
    np.testing.assert_allclose(item.behaviour_log_prob[:n], [-k / 10 for k in ks])
    np.testing.assert_array_equal(item.policy_version[:n], [version(k) for k in ks])
    np.testing.assert_array_equal(item.mask[:n], 1.0)


def check_end(item, n_real, final_obs, last_discount):
    """Step n_real is the final observation (mask 0), then zero padding."""
    np.testing.assert_array_equal(item.discount[n_real - 1], last_discount)
    np.testing.assert_array_equal(item.discount[: n_real - 1], 1.0)
    np.testing.assert_array_equal(item.observation[n_real], final_obs)
    np.testing.assert_array_equal(item.observation[n_real + 1:], 0.0)
    for field in ("action", "reward", "discount", "behaviour_log_prob", "policy_version", "mask"):
        np.testing.assert_array_equal(getattr(item, field)[n_real:], 0, err_msg=field)
    np.testing.assert_array_equal(item.extras["logits"][n_real:], 0.0)


def test_signature_is_t_plus_one_steps():
    assert SIGNATURE.observation.shape == (T + 1, OBS_DIM)
    assert SIGNATURE.action.shape == SIGNATURE.reward.shape == SIGNATURE.mask.shape == (T + 1,)
    assert SIGNATURE.extras["logits"].shape == (T + 1, NUM_ACTIONS)
    assert SIGNATURE.policy_version.dtype == tf.int64
    assert SIGNATURE.observation.dtype == SIGNATURE.action.dtype == tf.float32


def test_ten_step_episode_gives_overlapping_unrolls(client):
    with SequenceAdder(client, "seq", T) as adder:
        run_episode(adder, 10, last_discount=0.0)
    items = drain(client)
    assert len(items) == adder.num_items == 3
    check_steps(items[0], [0, 1, 2, 3, 4])
    check_steps(items[1], [4, 5, 6, 7, 8])
    check_steps(items[2], [8, 9])
    np.testing.assert_array_equal(items[0].discount, 1.0)
    # The bootstrap step of one unroll is the first step of the next one.
    for a, b in zip(items[:-1], items[1:]):
        for x, y in zip(replay_leaves(a), replay_leaves(b)):
            np.testing.assert_array_equal(x[-1], y[0])
    check_end(items[2], 2, obs(10), last_discount=0.0)  # termination: discount 0 kept


def replay_leaves(item):
    return tf.nest.flatten(item)


def test_episode_ending_on_the_bootstrap_step_needs_no_padding(client):
    with SequenceAdder(client, "seq", T) as adder:
        run_episode(adder, 8, last_discount=0.0)
    items = drain(client)
    assert len(items) == 2
    check_steps(items[1], [4, 5, 6, 7])
    check_end(items[1], 4, obs(8), last_discount=0.0)


def test_truncation_keeps_discount_and_final_observation(client):
    with SequenceAdder(client, "seq", T) as adder:
        run_episode(adder, 6, last_discount=1.0)
    items = drain(client)
    assert len(items) == 2
    check_steps(items[1], [4, 5])
    check_end(items[1], 2, obs(6), last_discount=1.0)  # learner bootstraps from obs(6)


def test_new_episode_starts_a_fresh_unroll_in_fifo_order(client):
    with SequenceAdder(client, "seq", T, max_in_flight_items=3) as adder:
        run_episode(adder, 5, last_discount=0.0)
        run_episode(adder, 3, last_discount=1.0, first=50)
        run_episode(adder, 9, last_discount=0.0, first=80)
    items = drain(client)
    assert [float(i.observation[0, 0]) for i in items] == [0, 4, 50, 80, 84, 88]
    check_steps(items[2], [0, 1, 2], first=50)
    check_end(items[2], 3, obs(53), last_discount=1.0)
    check_end(items[5], 1, obs(89), last_discount=0.0)


def test_policy_version_is_carried_per_step(client):
    version = lambda k: 10 + k // 3  # noqa: E731  (weights refreshed every 3 steps)
    with SequenceAdder(client, "seq", T) as adder:
        run_episode(adder, 7, last_discount=0.0, version=version)
    items = drain(client)
    np.testing.assert_array_equal(items[0].policy_version, [10, 10, 10, 11, 11])
    check_steps(items[1], [4, 5, 6], version=version)


def test_unfinished_episode_is_written_as_truncated(client):
    adder = SequenceAdder(client, "seq", T)
    run_episode(adder, 2, last_discount=1.0, end=False)
    run_episode(adder, 1, last_discount=0.0, first=50)
    adder.close()
    items = drain(client)
    check_steps(items[0], [0, 1])
    check_end(items[0], 2, obs(2), last_discount=1.0)
    check_end(items[1], 1, obs(51), last_discount=0.0)


def test_reset_drops_the_partial_unroll_and_realigns(client):
    with SequenceAdder(client, "seq", T) as adder:
        run_episode(adder, 3, last_discount=1.0, end=False)
        adder.reset()
        run_episode(adder, 5, last_discount=0.0, first=20)
    items = drain(client)
    assert len(items) == 2
    check_steps(items[0], [0, 1, 2, 3, 4], first=20)


def test_signature_mismatch_is_one_line(client):
    adder = SequenceAdder(client, "seq", T)
    adder.add_first(dm_env.restart(np.zeros(OBS_DIM + 1)))
    with pytest.raises(ValueError, match="observation") as err:
        adder.add(0, dm_env.transition(1.0, np.zeros(OBS_DIM + 1)),
                  extras={"logits": np.zeros(2)}, behaviour_log_prob=0.0, policy_version=0)
    assert "\n" not in str(err.value)
    adder.close()


def test_wrong_unroll_length_is_refused(client):
    with pytest.raises(ValueError, match="unroll_length=5"):
        SequenceAdder(client, "seq", 5)


def test_unreachable_server_fails_fast():
    with pytest.raises(replay.ReplayTimeoutError, match="is it running"):
        SequenceAdder(reverb.Client("localhost:1"), "seq", T, connect_timeout_s=1)


def test_full_queue_blocks_then_times_out_with_clear_error():
    srv = replay.make_server([replay.make_queue_table("tiny", 2, SIGNATURE)])
    adder = SequenceAdder(reverb.Client(f"localhost:{srv.port}"), "tiny", T,
                          max_in_flight_items=0, insert_timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(replay.ReplayTimeoutError, match="is full") as err:
        run_episode(adder, 12, last_discount=0.0)  # 3 unrolls into a queue of 2
    assert adder.num_items == 3 and time.monotonic() - start < 10
    assert "\n" not in str(err.value) and "insert_timeout_s" in str(err.value)
    srv.stop()


def test_back_pressure_releases_when_the_learner_samples():
    srv = replay.make_server([replay.make_queue_table("tiny", 2, SIGNATURE)])
    client = reverb.Client(f"localhost:{srv.port}")
    adder = SequenceAdder(client, "tiny", T, max_in_flight_items=0, insert_timeout_s=30)
    actor = threading.Thread(target=run_episode, args=(adder, 12, 0.0))
    actor.start()
    deadline = time.monotonic() + 10
    while client.server_info(timeout=5)["tiny"].current_size < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    assert actor.is_alive()  # blocked on the third unroll: the queue is full
    first = drain(client, "tiny")  # the learner takes the two queued unrolls ...
    actor.join(10)
    assert not actor.is_alive()  # ... and the actor gets going again
    rest = drain(client, "tiny")
    assert [float(i.observation[0, 0]) for i in first + rest] == [0, 4, 8]
    adder.close()
    srv.stop()
