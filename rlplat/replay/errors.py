"""Replay errors with one-line, actionable messages, and a server probe."""

from __future__ import annotations

import math
from typing import Dict, List, Optional

from rlplat.replay import reverb_client

from rlplat import replay_shards as shards


class ReplayTimeoutError(TimeoutError):
    """A wait on the replay server (connect, insert, sample) ran out of time."""


def probe_server(address: str, timeout_s: float) -> Optional[Dict[str, reverb_client.reverb_types.TableInfo]]:
    """Returns the server's table infos, or None if it did not answer in time.

    ``reverb.Client.server_info`` only takes whole seconds and treats 0 as "no
    deadline", so the timeout is rounded UP to at least one second; a probe can
    therefore never block forever.
    """
    timeout = max(1, math.ceil(timeout_s))
    try:
        return reverb_client.Client(address).server_info(timeout=timeout)
    except (reverb_client.errors.DeadlineExceededError, RuntimeError):
        return None


def probe_shards(address: str, timeout_s: float) -> Optional[List[Dict[str, reverb_client.reverb_types.TableInfo]]]:
    """Each server's table infos, in the order ``address`` names them; None if any did not answer."""
    answers = []
    for shard in shards.split_addresses(address):
        infos = probe_server(shard, timeout_s)
        if infos is None:
            return None
        answers.append(infos)
    return answers


def shard_counts(address: str, timeout_s: float) -> Optional[List[Dict[str, int]]]:
    """Per server of ``address``: its items, completed inserts and samples, all tables summed.

    Plain integers, so a process with Reverb can answer for one without it
    (the Ray driver asks the learner). None if any server did not answer.
    """
    answers = probe_shards(address, timeout_s)
    if answers is None:
        return None
    return [{"replay_size": int(sum(i.current_size for i in infos.values())),
             "replay_inserts": int(sum(i.rate_limiter_info.insert_stats.completed for i in infos.values())),
             "replay_samples": int(sum(i.rate_limiter_info.sample_stats.completed for i in infos.values()))}
            for infos in answers]


def server_unreachable(address: str, timeout_s: float) -> ReplayTimeoutError:
    """The error raised whenever the server itself does not answer."""
    return ReplayTimeoutError(
        f"replay server at {address} did not respond within {timeout_s:g}s; "
        f"is it running? (start it with rlplat.replay.make_server and check "
        f"the host:port)"
    )


def table_info(address: str, table: str, timeout_s: float) -> reverb_client.reverb_types.TableInfo:
    """Info of ``table`` at ``address``; one-line errors if unreachable/missing."""
    infos = probe_server(address, timeout_s)
    if infos is None:
        raise server_unreachable(address, timeout_s)
    if table not in infos:
        raise _missing_table(address, table, infos)
    return infos[table]


def _limiter_state(info: reverb_client.reverb_types.TableInfo) -> str:
    rl = info.rate_limiter_info
    return (
        f"size {info.current_size}/{info.max_size}, "
        f"min_size_to_sample {rl.min_size_to_sample}, "
        f"samples_per_insert {rl.samples_per_insert:g}"
    )


def insert_timeout(address: str, table: str, timeout_s: float) -> Exception:
    """Explains why an insert (writer flush) did not complete in time.

    The same symptom has two very different causes: the server is gone, or the
    server is fine but the table's rate limiter is holding inserts back because
    the learner is not sampling. A quick probe tells them apart.
    """
    infos = probe_server(address, 1.0)
    if infos is None:
        return server_unreachable(address, timeout_s)
    state = _limiter_state(infos[table]) if table in infos else "table missing"
    return ReplayTimeoutError(
        f"replay table {table!r} at {address} did not accept inserts within "
        f"{timeout_s:g}s although the server is up ({state}): its rate limiter "
        f"is blocking inserts; is the learner sampling? (raise error_buffer or "
        f"the adder's flush_timeout_s)"
    )


def sample_timeout(address: str, table: str, timeout_s: float) -> Exception:
    """Explains why sampling produced no full batch in time (``address`` may name shards)."""
    addresses = shards.split_addresses(address)
    if len(addresses) > 1:
        return _shards_sample_timeout(addresses, table, timeout_s)
    infos = probe_server(address, 1.0)
    if infos is None:
        return server_unreachable(address, timeout_s)
    if table not in infos:
        return _missing_table(address, table, infos)
    return ReplayTimeoutError(
        f"replay table {table!r} at {address} gave no full batch within "
        f"{timeout_s:g}s ({_limiter_state(infos[table])}): its rate limiter is "
        f"blocking samples; are the actors inserting? (start actors, lower "
        f"min_replay_size, or raise rate_limiter_timeout_ms)"
    )


def _missing_table(address: str, table: str, infos) -> ValueError:
    return ValueError(
        f"replay server at {address} has no table {table!r} "
        f"(tables: {', '.join(sorted(infos))}); fix the table name"
    )


def _shards_sample_timeout(addresses, table: str, timeout_s: float) -> Exception:
    """The sharded case: a dead shard is named; else every shard's limiter state."""
    states = []
    for address in addresses:
        infos = probe_server(address, 1.0)
        if infos is None:
            return server_unreachable(address, timeout_s)
        if table not in infos:
            return _missing_table(address, table, infos)
        states.append(f"{address}: {_limiter_state(infos[table])}")
    return ReplayTimeoutError(
        f"replay table {table!r} gave no full batch within {timeout_s:g}s from its "
        f"{len(addresses)} shards ({'; '.join(states)}): a rate limiter is blocking samples; "
        f"are the actors of every shard inserting? (start actors, lower min_replay_size, "
        f"or raise rate_limiter_timeout_ms)"
    )
