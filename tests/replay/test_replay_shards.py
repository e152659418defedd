"""Replay shards: the split rules by hand, then sampling two real Reverb servers as one."""

from __future__ import annotations

import numpy as np
import pytest
import reverb

from rlplat import replay
from rlplat import replay_shards
from replay_testlib import run_episode


# ------------------------------------------------------------------ rules
def test_addresses_split_and_join_both_ways():
    assert replay_shards.split_addresses("h:1") == ["h:1"]
    assert replay_shards.split_addresses("h:1, g:2") == ["h:1", "g:2"]
    assert replay_shards.join_addresses(["h:1", "g:2"]) == "h:1,g:2"
    assert replay_shards.num_shards("a:1,b:2,c:3") == 3
    with pytest.raises(ValueError, match="empty entry"):
        replay_shards.split_addresses("h:1,,g:2")


def test_actor_i_writes_to_shard_i_mod_s():
    address = "a:1,b:2,c:3"
    assert [replay_shards.address_for_actor(address, i) for i in range(7)] == [
        "a:1", "b:2", "c:3", "a:1", "b:2", "c:3", "a:1"]
    assert replay_shards.address_for_actor("only:1", 5) == "only:1"


def test_batches_split_equally_with_the_remainder_first():
    assert replay_shards.shard_batch_sizes(256, 1) == [256]
    assert replay_shards.shard_batch_sizes(256, 2) == [128, 128]
    assert replay_shards.shard_batch_sizes(256, 3) == [86, 85, 85]
    assert replay_shards.shard_batch_sizes(5, 5) == [1, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="cannot take an item from each of 4"):
        replay_shards.shard_batch_sizes(3, 4)


@pytest.mark.parametrize("num_actors, num_shards, message", [
    (4, 0, "must be >= 1"),
    (3, 2, "num_actors 3 is not a multiple of num_replay_shards 2"),
])
def test_shard_counts_the_even_split_cannot_serve_are_refused(num_actors, num_shards, message):
    with pytest.raises(ValueError, match=message):
        replay_shards.check_shards(num_actors, num_shards)
    replay_shards.check_shards(4, 2)  # and a good one passes


# ------------------------------------------------------- two real servers
@pytest.fixture()
def two_shards(signature):
    """Two servers with the same rate-limited table; shard k's rewards are all k + 1."""
    servers = [replay.make_server([replay.make_uniform_table(
        "uniform", 1000, replay.make_rate_limiter(None, 1), signature)]) for _ in range(2)]
    addresses = [f"127.0.0.1:{s.port}" for s in servers]
    for k, address in enumerate(addresses):
        with replay.NStepTransitionAdder(reverb.Client(address), "uniform", 1, 0.99) as adder:
            run_episode(adder, [float(k + 1)] * 40, last_discount=0.0)
    yield addresses
    for s in servers:
        s.stop()


def _sample_counts(address):
    return [reverb.Client(a).server_info(timeout=5)["uniform"].rate_limiter_info.sample_stats.completed
            for a in replay_shards.split_addresses(address)]


def test_each_batch_takes_an_equal_share_from_every_shard(two_shards):
    address = replay_shards.join_addresses(two_shards)
    dataset = replay.make_transition_dataset(address, "uniform", 6, rate_limiter_timeout_ms=5000,
                                             prefetch=0)
    assert dataset.element_spec.reward.shape == (6,)  # static: what tf.distribute needs
    for batch in dataset.take(5):
        # Shard order within a batch: 3 items of shard 0 (reward 1), then 3 of shard 1 (reward 2).
        np.testing.assert_array_equal(batch.reward.numpy(), [1, 1, 1, 2, 2, 2])
    counts = _sample_counts(address)
    # Equal but for the samples each side's worker had in flight (2 x 3 requested at a time).
    assert min(counts) >= 15 and abs(counts[0] - counts[1]) <= 12, counts


def test_an_odd_batch_gives_the_first_shard_the_extra_item(two_shards):
    dataset = replay.make_transition_dataset(replay_shards.join_addresses(two_shards), "uniform", 5,
                                             rate_limiter_timeout_ms=5000)
    np.testing.assert_array_equal(next(iter(dataset)).reward.numpy(), [1, 1, 1, 2, 2])


def test_sampling_shards_needs_batches_without_sample_keys(two_shards):
    with pytest.raises(ValueError, match="needs one replay server"):
        replay.make_transition_dataset(replay_shards.join_addresses(two_shards), "uniform", 4, keep_info=True)


def test_a_blocked_shard_is_named_in_the_timeout(two_shards, signature):
    empty = replay.make_server([replay.make_uniform_table(
        "uniform", 100, replay.make_rate_limiter(None, 1), signature)])
    try:
        address = replay_shards.join_addresses([two_shards[0], f"127.0.0.1:{empty.port}"])
        dataset = replay.make_transition_dataset(address, "uniform", 4, rate_limiter_timeout_ms=300)
        with pytest.raises(replay.ReplayTimeoutError) as caught:
            replay.next_batch(iter(dataset), address, "uniform", rate_limiter_timeout_ms=300)
        message = str(caught.value)
        assert "2 shards" in message and f"127.0.0.1:{empty.port}: size 0/100" in message, message
        assert "\n" not in message
    finally:
        empty.stop()
