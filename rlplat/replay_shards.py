"""Replay over several Reverb servers (shards): who writes where, who samples what.

One Reverb server has a ceiling (``bench/replay_capacity.py``): past some
number of writers its insert rate stops growing. ``--num-replay-shards S``
runs S servers with the same tables. The rules, kept here in one place:

- An address names one server (``host:port``) or several, joined by commas
  (``host:p1,host:p2``). Builders keep taking one string: adders get ONE
  shard's address (``address_for_actor``), learners get the joined string and
  sample every shard (``rlplat.replay.make_transition_dataset`` splits it).
- Actor i writes to shard ``i % S``; ``check_shards`` requires the number of
  actors to be a multiple of S, so every shard takes the same insert rate.
- Each batch takes an equal share from every shard (``shard_batch_sizes``;
  shards differ by at most one item when S does not divide the batch). Equal
  inserts and equal samples per shard mean each shard's own rate limiter,
  configured with the agent's samples-per-insert, keeps the ratio for the
  whole run: the learner cannot outrun the slowest shard, and no shard fills
  ahead of the others by more than its limiter's error buffer.

Everything here but ``zip_shards`` is plain Python (no TensorFlow, no Reverb),
outside ``rlplat.replay`` (whose package imports Reverb) so the command line
and the driver can check a layout before anything heavy starts.
"""

from __future__ import annotations

from typing import Any, Callable, List, Sequence


def split_addresses(address: str) -> List[str]:
    """``"h:1,h:2"`` -> ``["h:1", "h:2"]``; one address -> a list of one."""
    parts = [part.strip() for part in str(address).split(",")]
    if not all(parts):
        raise ValueError(f"replay address {address!r} has an empty entry; give host:port[,host:port...]")
    return parts


def join_addresses(addresses: Sequence[str]) -> str:
    """The one string that names every shard (the inverse of ``split_addresses``)."""
    if not addresses:
        raise ValueError("no replay shard addresses")
    return ",".join(addresses)


def num_shards(address: str) -> int:
    """How many servers ``address`` names."""
    return len(split_addresses(address))


def address_for_actor(address: str, actor_index: int) -> str:
    """The one shard actor ``actor_index`` writes to (``actor_index % S``)."""
    shards = split_addresses(address)
    return shards[int(actor_index) % len(shards)]


def check_shards(num_actors: int, num_replay_shards: int) -> None:
    """Refuses a shard count the even split cannot serve (one-line ``ValueError``)."""
    if num_replay_shards < 1:
        raise ValueError(f"num_replay_shards must be >= 1 (got {num_replay_shards})")
    if num_actors % num_replay_shards:
        raise ValueError(f"num_actors {num_actors} is not a multiple of num_replay_shards "
                         f"{num_replay_shards}: every shard takes the same number of actors, so that "
                         "sampling them equally keeps samples-per-insert; change either")


def shard_batch_sizes(batch_size: int, num_shards_: int) -> List[int]:
    """An equal share of ``batch_size`` per shard; the first ``batch_size % S`` shards take one more."""
    if num_shards_ < 1:
        raise ValueError(f"need at least one replay shard (got {num_shards_})")
    if batch_size < num_shards_:
        raise ValueError(f"a batch of {batch_size} cannot take an item from each of {num_shards_} "
                         "replay shards; raise the batch size or lower --num-replay-shards")
    base, extra = divmod(int(batch_size), int(num_shards_))
    return [base + (1 if i < extra else 0) for i in range(num_shards_)]


def metric_key(shard: int, name: str) -> str:
    """The log key of one shard's figure (``replay_shard<i>_<name>``): the driver writes it, status reads it."""
    return f"replay_shard{int(shard)}_{name}"


def zip_shards(datasets: Sequence[Any], concat: Callable[[List[Any]], Any]) -> Any:
    """One dataset whose element joins one batch of each shard's dataset (``concat``).

    ``concat`` gets the shards' elements in shard order and returns one
    element (e.g. the leaves concatenated along the batch axis).
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if len(datasets) == 1:
        return datasets[0]
    # Restructuring only: AutoGraph would convert ``concat`` and the dm-tree code it calls for nothing.
    return tf.data.Dataset.zip(tuple(datasets)).map(
        tf.autograph.experimental.do_not_convert(lambda *parts: concat(list(parts))))
