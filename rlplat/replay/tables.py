"""Reverb table and rate-limiter factories, with deadlock checks.

A Reverb ``SampleToInsertRatio`` limiter tracks
``error = inserts * samples_per_insert - samples`` and blocks any insert or
sample that would push ``error`` out of
``[offset - error_buffer, offset + error_buffer]`` where
``offset = min_size_to_sample * samples_per_insert`` (the value of ``error``
when the table first becomes sampleable). Inserts move ``error`` up by
``samples_per_insert``, samples move it down by one.
"""

from __future__ import annotations

from typing import Any, Optional

import reverb

# Plain-Python rules, importable without Reverb/TF (the command line checks flags with them).
from rlplat.replay_rules import default_error_buffer, validate_rate_limiter  # noqa: F401


def make_rate_limiter(
    samples_per_insert: Optional[float],
    min_size_to_sample: int,
    error_buffer: Optional[float] = None,
    *,
    global_batch_size: Optional[int] = None,
    num_actors: int = 1,
) -> reverb.rate_limiters.RateLimiter:
    """Builds the table's rate limiter.

    Args:
      samples_per_insert: Target samples per inserted item; None gives a
        ``MinSize`` limiter (actors and learner run free after warm-up).
      min_size_to_sample: Items needed before sampling starts.
      error_buffer: Allowed deviation from the ratio; None uses
        ``default_error_buffer``.
      global_batch_size: If given, the settings are validated with
        ``validate_rate_limiter`` and the default error buffer uses it.
      num_actors: Number of inserting actors (for the default error buffer).

    Returns:
      ``reverb.rate_limiters.SampleToInsertRatio`` or ``MinSize``.
    """
    if global_batch_size is not None:
        validate_rate_limiter(
            samples_per_insert, min_size_to_sample, global_batch_size, num_actors, error_buffer
        )
    elif min_size_to_sample < 1:
        raise ValueError(f"min_size_to_sample={min_size_to_sample} must be >= 1")
    if samples_per_insert is None:
        return reverb.rate_limiters.MinSize(min_size_to_sample)
    if samples_per_insert <= 0:
        raise ValueError(f"samples_per_insert={samples_per_insert} must be > 0")
    if error_buffer is None:
        error_buffer = default_error_buffer(
            samples_per_insert, min_size_to_sample, global_batch_size, num_actors
        )
    return reverb.rate_limiters.SampleToInsertRatio(
        samples_per_insert=samples_per_insert,
        min_size_to_sample=min_size_to_sample,
        error_buffer=error_buffer,
    )


def _check_capacity(
    name: str, max_size: int, rate_limiter: reverb.rate_limiters.RateLimiter
) -> None:
    # Reverb accepts a limiter whose warm-up size exceeds the table capacity and
    # then never lets anyone sample; catch it while the stack trace is useful.
    min_size = getattr(rate_limiter, "_min_size_to_sample", 1)
    if max_size < min_size:
        raise ValueError(
            f"table {name!r}: max_size={max_size} < rate limiter "
            f"min_size_to_sample={min_size}; raise max_size"
        )


def make_uniform_table(
    name: str, max_size: int, rate_limiter: reverb.rate_limiters.RateLimiter, signature: Any
) -> reverb.Table:
    """A uniformly sampled replay table that evicts its oldest items first."""
    _check_capacity(name, max_size, rate_limiter)
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=rate_limiter,
        signature=signature,
    )


def make_prioritized_table(
    name: str,
    max_size: int,
    rate_limiter: reverb.rate_limiters.RateLimiter,
    signature: Any,
    priority_exponent: float = 0.6,
) -> reverb.Table:
    """A prioritized replay table (P(i) ~ priority_i ** priority_exponent).

    Eviction is FIFO rather than lowest-priority so that stale items whose
    priorities were never updated do not stay forever.
    """
    if priority_exponent < 0:
        raise ValueError(f"priority_exponent={priority_exponent} must be >= 0")
    _check_capacity(name, max_size, rate_limiter)
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Prioritized(priority_exponent),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=rate_limiter,
        signature=signature,
    )


def make_queue_table(name: str, max_size: int, signature: Any) -> reverb.Table:
    """A FIFO queue: each item is sampled exactly once, in insertion order.

    Inserts block when ``max_size`` items are waiting (back-pressure on actors)
    and samples block when it is empty. Read it with a single worker per
    iterator (``num_workers_per_iterator=1``) to keep the order.
    """
    return reverb.Table.queue(name=name, max_size=max_size, signature=signature)
