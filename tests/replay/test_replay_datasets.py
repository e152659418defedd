"""Sampling pipelines against a real Reverb server."""

from __future__ import annotations

import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlplat import replay
from replay_testlib import ACT_DIM, OBS_DIM, run_episode


@pytest.fixture(scope="module")
def filled(address):
    with replay.NStepTransitionAdder(reverb.Client(address), "uniform", 3, 0.99) as adder:
        run_episode(adder, [1.0] * 64, last_discount=0.0)
    return address


def _assert_batch(batch, size):
    assert isinstance(batch, replay.Transition)
    shapes = {k: tuple(v.shape) for k, v in batch._asdict().items()}
    assert shapes == dict(
        observation=(size, OBS_DIM),
        action=(size, ACT_DIM),
        reward=(size,),
        discount=(size,),
        next_observation=(size, OBS_DIM),
    )
    assert all(v.dtype == tf.float32 for v in batch)


def test_dataset_batches(filled):
    ds = replay.make_transition_dataset(filled, "uniform", 8, rate_limiter_timeout_ms=5000)
    # Static batch dimension: what tf.distribute / XLA need.
    assert ds.element_spec.observation.shape == (8, OBS_DIM)
    it = iter(ds)
    for _ in range(2):
        _assert_batch(next(it), 8)


def test_input_fn_gives_per_replica_batches(filled):
    input_fn = replay.make_input_fn(
        filled, "uniform", global_batch_size=16, rate_limiter_timeout_ms=5000
    )
    ctx = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2
    )
    _assert_batch(next(iter(input_fn(ctx))), 8)
    # And through a real strategy (one replica here).
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dist = strategy.distribute_datasets_from_function(input_fn)
    _assert_batch(next(iter(dist)), 16)


def test_keep_info_returns_replay_samples(filled):
    ds = replay.make_transition_dataset(
        filled, "uniform", 4, keep_info=True, rate_limiter_timeout_ms=5000
    )
    sample = next(iter(ds))
    assert sample.info.key.shape == (4,)
    np.testing.assert_array_less(0.0, sample.info.probability.numpy())


def test_empty_table_times_out_clearly(address):
    ds = replay.make_transition_dataset(address, "empty", 4, rate_limiter_timeout_ms=200)
    start = time.monotonic()
    with pytest.raises(
        replay.ReplayTimeoutError, match="'empty'.*no full batch within 0.2s"
    ) as err:
        replay.next_batch(iter(ds), address, "empty", 200)
    assert time.monotonic() - start < 10
    assert "\n" not in str(err.value)


def test_timeout_inside_tf_function_is_translated(address):
    ds = replay.make_transition_dataset(address, "empty", 4, rate_limiter_timeout_ms=100)
    it = iter(ds)

    @tf.function
    def step():
        return it.get_next().reward

    with pytest.raises(replay.ReplayTimeoutError, match="are the actors"):
        with replay.translate_sampling_errors(address, "empty", 100):
            step()


def test_dead_server_fails_fast(dead_address):
    with pytest.raises(
        replay.ReplayTimeoutError, match=f"{dead_address} did not respond within 1s"
    ):
        replay.make_transition_dataset(dead_address, "uniform", 4, connect_timeout_s=1)


def test_wait_for_table_size(filled):
    assert replay.wait_for_table_size(filled, "uniform", 10, timeout_s=5) >= 64
    with pytest.raises(replay.ReplayTimeoutError, match="holds 0 items"):
        replay.wait_for_table_size(filled, "empty", 1, timeout_s=0.2, poll_s=0.05)
