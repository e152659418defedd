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


def default_error_buffer(
    samples_per_insert: float,
    min_replay_size: int,
    global_batch_size: Optional[int] = None,
    num_actors: int = 1,
) -> float:
    """A safe ``error_buffer`` for ``SampleToInsertRatio``.

    At the moment the table becomes sampleable ``error`` sits in the middle of
    the allowed range, so the learner can draw ``error_buffer`` samples and the
    actors can insert ``error_buffer / samples_per_insert`` items before either
    side has to wait for the other. We want both at once: the learner must get a
    full global batch (otherwise every step waits on fresh inserts), and every
    actor must get at least one item in (otherwise actors queue behind each
    other from the first step). Twice the larger of the two leaves room for the
    learner's prefetch of the next batch and a second round of inserts.

    Acme uses ``0.1 * samples_per_insert * min_replay_size`` instead; that scales
    with the replay size rather than with what the two sides actually consume
    and can be smaller than one batch for small replays.

    Args:
      samples_per_insert: Target samples per inserted item.
      min_replay_size: Items needed before sampling starts.
      global_batch_size: Items the learner samples per step (all replicas). If
        None, ``min_replay_size`` stands in for it: validation requires
        ``min_replay_size >= global_batch_size``, so a full batch still fits.
      num_actors: Number of concurrently inserting actors.

    Returns:
      The error buffer (a float, as Reverb expects).
    """
    batch = global_batch_size if global_batch_size is not None else min_replay_size
    return 2.0 * max(float(batch), num_actors * max(1.0, samples_per_insert))


def validate_rate_limiter(
    samples_per_insert: Optional[float],
    min_replay_size: int,
    global_batch_size: int,
    num_actors: int = 1,
    error_buffer: Optional[float] = None,
    max_replay_size: Optional[int] = None,
) -> None:
    """Raises ValueError (one line, naming the fix) on settings that can stall.

    Args:
      samples_per_insert: Target ratio, or None for a plain MinSize limiter.
      min_replay_size: Items needed before sampling starts.
      global_batch_size: Items the learner samples per step (all replicas).
      num_actors: Number of concurrently inserting actors.
      error_buffer: The ``SampleToInsertRatio`` error buffer; None means
        ``default_error_buffer(...)`` will be used.
      max_replay_size: Table capacity, if known.

    Raises:
      ValueError: If the settings can deadlock or make sampling meaningless.
    """
    if global_batch_size < 1:
        raise ValueError(f"global_batch_size={global_batch_size} must be >= 1")
    if num_actors < 1:
        raise ValueError(f"num_actors={num_actors} must be >= 1")
    if min_replay_size < 1:
        raise ValueError(
            f"min_replay_size={min_replay_size} must be >= 1; "
            f"set it to at least global_batch_size={global_batch_size}"
        )
    if min_replay_size < global_batch_size:
        # Not a hard deadlock with uniform sampling, but the first batches would
        # be mostly duplicates of a handful of items.
        raise ValueError(
            f"min_replay_size={min_replay_size} is smaller than one "
            f"batch; set min_replay_size >= global_batch_size="
            f"{global_batch_size}"
        )
    if max_replay_size is not None and max_replay_size < min_replay_size:
        # The table can never hold min_replay_size items: sampling never starts.
        raise ValueError(
            f"max_replay_size={max_replay_size} < min_replay_size="
            f"{min_replay_size} would block sampling forever; raise "
            f"max_replay_size or lower min_replay_size"
        )
    if samples_per_insert is None:
        return
    if samples_per_insert <= 0:
        raise ValueError(
            f"samples_per_insert={samples_per_insert} must be > 0 "
            f"(use None to disable the ratio limiter)"
        )
    if error_buffer is None:
        return  # The default is safe by construction.
    needed = max(float(global_batch_size), samples_per_insert, 1.0)
    if error_buffer < needed:
        raise ValueError(
            f"error_buffer={error_buffer:g} leaves the sampler no room for one "
            f"batch; set error_buffer >= max(global_batch_size, "
            f"samples_per_insert, 1) = {needed:g} or leave it None"
        )


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
