"""Rate-limiter validation and table factories (no server needed)."""

from __future__ import annotations

import pytest
import reverb

from rlplat import replay

ACME = dict(samples_per_insert=32, min_replay_size=1000, global_batch_size=256, num_actors=2)


@pytest.mark.parametrize("error_buffer", [None, 0.1 * 32 * 1000])
def test_acme_defaults_pass(error_buffer):
    replay.validate_rate_limiter(**ACME, error_buffer=error_buffer)
    limiter = replay.make_rate_limiter(32, 1000, error_buffer, global_batch_size=256, num_actors=2)
    assert isinstance(limiter, reverb.rate_limiters.SampleToInsertRatio)


@pytest.mark.parametrize(
    "override,fix",
    [
        (dict(error_buffer=100), "error_buffer >="),
        (dict(min_replay_size=0), "min_replay_size=0 must be >= 1"),
        (dict(min_replay_size=100), "min_replay_size >= global_batch_size"),
        (dict(samples_per_insert=0), "samples_per_insert=0 must be > 0"),
        (dict(samples_per_insert=-1.0), "must be > 0"),
        (dict(max_replay_size=500), "raise max_replay_size"),
    ],
)
def test_deadlocking_settings_raise_one_line(override, fix):
    with pytest.raises(ValueError, match=fix) as err:
        replay.validate_rate_limiter(**{**ACME, **override})
    assert "\n" not in str(err.value)


def test_default_error_buffer_fits_a_batch_and_every_actor():
    # 2 * max(batch, actors * spi): room for one batch + prefetch, and for
    # every actor's first insert at once.
    assert replay.default_error_buffer(32, 1000, 256, 2) == 512
    assert replay.default_error_buffer(32, 1000, 256, 100) == 6400
    # Unknown batch size: min_replay_size (>= batch once validated) stands in.
    assert replay.default_error_buffer(1, 1000) == 2000
    # Reverb itself accepts the derived values.
    replay.make_rate_limiter(0.5, 10, global_batch_size=10)


def test_min_size_limiter_when_ratio_is_none():
    limiter = replay.make_rate_limiter(None, 10)
    assert isinstance(limiter, reverb.rate_limiters.MinSize)


def test_table_smaller_than_warmup_raises(signature):
    with pytest.raises(ValueError, match="raise max_size"):
        replay.make_uniform_table("t", 10, replay.make_rate_limiter(None, 100), signature)


def test_table_factories(signature):
    limiter = replay.make_rate_limiter(None, 1)
    assert replay.make_prioritized_table("p", 10, limiter, signature, 0.6).name == "p"
    assert replay.make_queue_table("q", 10, signature).info.max_times_sampled == 1
