"""Rate-limiter rules of the replay tables, in plain Python (neither Reverb nor TensorFlow).

``validate_rate_limiter`` refuses settings that can stall and
``default_error_buffer`` picks a safe ``SampleToInsertRatio`` error buffer.
They live outside ``rlplat.replay`` (whose package imports Reverb, hence
TensorFlow) so that the command line can check a run's flags in a fraction of
a second, before anything heavy starts; ``rlplat.replay.tables`` re-exports
both (the same functions). See ``rlplat.replay.tables`` for how Reverb's
``SampleToInsertRatio`` limiter works.
"""

from __future__ import annotations

from typing import Any, Optional


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


def check_ratio(config: Any) -> None:
    """Refuses a samples-per-insert ratio that makes one side wait longer than the whole warm-up.

    For a config with ``samples_per_insert``, ``min_replay_size`` and
    ``global_batch_size`` (checked in its ``__post_init__``, where the values
    live). The limiter holds sampled / inserted at the ratio, so a learner
    step (one batch) waits for ``batch / spi`` new items and an inserted item
    waits for ``spi / batch`` learner steps. Beyond one warm-up either wait
    makes the run crawl and then time out (spi 0.001 at batch 256: 256,000
    env steps per learner step).
    """
    spi, batch, warmup = config.samples_per_insert, config.global_batch_size, max(1, config.min_replay_size)
    if not spi > 0:
        raise ValueError(f"samples_per_insert must be > 0 (got {spi!r}); set samples_per_insert above 0 (e.g. 32)")
    if batch / spi > warmup:
        raise ValueError(
            f"samples_per_insert {spi:g} would stall the learner: each learner step "
            f"(global_batch_size {batch}) waits for {batch / spi:,.0f} new transitions, more than "
            f"the whole warm-up (min_replay_size {warmup}); use samples_per_insert "
            f">= {batch / warmup:g} (e.g. 32), or raise min_replay_size")
    if spi / batch > warmup:
        raise ValueError(
            f"samples_per_insert {spi:g} would stall the actors: each transition they insert "
            f"waits for {spi / batch:,.0f} learner steps (global_batch_size {batch}), more than "
            f"min_replay_size {warmup}; use samples_per_insert <= {batch * warmup:g} (e.g. 32)")


# The config fields a transition table and its rate limiter are built from
# (an AgentSpec's replay_fields: a restored replay checkpoint keeps them).
TABLE_FIELDS = ("samples_per_insert", "min_replay_size", "max_replay_size", "global_batch_size")


def check_transition_replay(config: Any, facts: Any) -> Any:
    """An ``AgentSpec.check`` for agents on ``TransitionReplay``: their replay settings cannot stall.

    ``config`` has ``samples_per_insert``, ``min_replay_size``,
    ``max_replay_size`` and ``global_batch_size``; ``facts`` is the run's
    ``RunFacts``. Returns ``config`` unchanged.
    """
    # At least one actor: fewer is the run's own error, reported in its words.
    validate_rate_limiter(config.samples_per_insert, config.min_replay_size, config.global_batch_size,
                          max(1, facts.num_actors), max_replay_size=config.max_replay_size)
    return config
