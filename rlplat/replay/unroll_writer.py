"""UnrollWriter: writes whole unrolls to a Reverb table, one append and one item each.

Shared by ``SequenceAdder`` (one stream) and ``BatchSequenceAdder`` (K
streams through one writer). Each unroll is a list of arrays, one per leaf
of the table's step signature, each [T+1, ...]. It is appended as ONE step
(its own chunk per column, ``max_chunk_length=1``) and referenced by one
squeezed item, so a sampled item's fields are [T+1, ...] and a sample
transfers only that unroll. A Reverb append costs tens of microseconds
whatever its size, so this per-unroll cost is what keeps writing cheap.
"""

from __future__ import annotations

from typing import List

import numpy as np
from rlplat.replay import reverb_client

from rlplat.replay import errors


def queue_insert_timeout(address: str, table: str, timeout_s: float) -> Exception:
    """Explains an insert that timed out; a full queue gets its own message."""
    infos = errors.probe_server(address, 1.0)
    if infos is None:
        return errors.server_unreachable(address, timeout_s)
    info = infos.get(table)
    if info is None or info.current_size < info.max_size:
        return errors.insert_timeout(address, table, timeout_s)
    return errors.ReplayTimeoutError(
        f"replay queue {table!r} at {address} is full ({info.current_size}/"
        f"{info.max_size} unrolls) and took no new unroll within {timeout_s:g}s: "
        f"the learner is not consuming; is it running? (waiting is normal "
        f"back-pressure; raise the adder's insert_timeout_s if the learner "
        f"pauses for longer)"
    )


class UnrollWriter:
    """One Reverb trajectory writer that writes unrolls as single-step items.

    Args:
      client: a ``reverb.Client`` of the server.
      table: the table items go to.
      num_columns: leaves per step (the flattened step signature).
      priority: every item's priority (ignored by queues).
      insert_timeout_s: bound on every blocking wait (flush, episode end).
    """

    def __init__(self, client: reverb_client.Client, table: str, num_columns: int, *, priority: float,
                 insert_timeout_s: float):
        self._address = client.server_address
        self._table = table
        self._priority = float(priority)
        self._timeout_s = float(insert_timeout_s)
        self._timeout_ms = int(insert_timeout_s * 1000)
        self._writer = client.trajectory_writer(num_keep_alive_refs=1, validate_items=False)
        for i in range(num_columns):
            # Each append is a whole unroll: its own chunk, referenced by one item.
            self._writer.configure((i,), num_keep_alive_refs=1, max_chunk_length=1)
        self._cpp = None  # Direct C++ writer, set after the first append.

    def write(self, unroll: List[np.ndarray]) -> None:
        """Appends ``unroll`` (one [T+1, ...] array per column) and creates its item.

        The arrays must not change afterwards (callers hand over fresh ones).
        """
        if self._cpp is not None:
            refs = self._cpp.Append(unroll)
            self._cpp.CreateItem(self._table, self._priority, [[ref] for ref in refs], [True] * len(refs))
            return
        # First item: the public API creates the configured columns.
        self._writer.append(unroll)
        # A single index: a squeezed column, so the item's fields are [T+1, ...].
        self._writer.create_item(self._table, self._priority, [column[-1] for column in self._writer.history])
        # From now on talk to the C++ writer directly, as NStepTransitionAdder
        # does: the wrapper's per-step bookkeeping buys nothing for flat steps.
        cpp = getattr(self._writer, "_writer", None)
        if hasattr(cpp, "Append") and hasattr(cpp, "CreateItem"):
            self._cpp = cpp

    def flush(self, max_in_flight_items: int = 0) -> None:
        """Blocks until at most ``max_in_flight_items`` created items are unconfirmed."""
        self._call(self._writer.flush, max_in_flight_items, timeout_ms=self._timeout_ms)

    def end_episode(self) -> None:
        """Clears the writer's episode buffers (waits for every item to be confirmed)."""
        self._call(self._writer.end_episode, True, timeout_ms=self._timeout_ms)

    def close(self) -> None:
        """Closes the writer (call ``flush`` first to keep unconfirmed items)."""
        self._writer.close()

    def _call(self, fn, *args, **kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except reverb_client.errors.DeadlineExceededError as e:
            raise queue_insert_timeout(self._address, self._table, self._timeout_s) from e
