"""TransitionStream: one Reverb writer stream of one-step items, as the n-step adders write them.

An n-step adder computes each transition itself, so every item references the
single step appended just before it. What is left is the writer's life: it is
created on the first item (its chunk length depends on the item's size),
flushed every ``flush_period`` items with at most ``max_pending_items``
unconfirmed, and closed; every wait has a timeout. ``NStepTransitionAdder``
owns one stream and ends its episode at every episode end; a
``VectorNStepAdder`` shares one among all of its environments and flushes it
at an episode end instead (the other environments are still writing).
"""

from __future__ import annotations

from typing import Any, List

import numpy as np
from rlplat.replay import reverb_client

from rlplat.replay import errors

# Reverb logs "number of pending items is alarmingly high" once 50 items are
# in flight, so the default bound stays just under it.
DEFAULT_MAX_PENDING_ITEMS = 48


class TransitionStream:
    """Writes flat one-step items to ``table`` through one trajectory writer.

    Args:
      client: a ``reverb.Client`` (the writer is made on the first item), or
        an existing ``reverb.TrajectoryWriter``, used as is.
      table: the table items go to.
      address: ``host:port``, for error messages.
      flush_period: flush every this many items; also the chunk length for
        small items, so each flush sends one chunk per column.
      max_pending_items: bound on items not yet confirmed by the server (>=
        ``flush_period``).
      max_chunk_bytes: chunks stay under this size (a sampled item transfers
        its whole chunk, so big items get short chunks).
      flush_timeout_s: bound on every flush (per block, episode end, close).
    """

    def __init__(self, client: Any, table: str, address: str, *, flush_period: int = 32,
                 max_pending_items: int = DEFAULT_MAX_PENDING_ITEMS, max_chunk_bytes: int = 16 * 1024,
                 flush_timeout_s: float = 60.0):
        if flush_period < 1 or max_pending_items < flush_period:
            raise ValueError(f"need 1 <= flush_period ({flush_period}) <= "
                             f"max_pending_items ({max_pending_items})")
        if hasattr(client, "trajectory_writer"):  # A reverb_client.Client.
            self._client, self._writer = client, None
        else:
            self._client, self._writer = None, client
        self._table = table
        self._address = address
        self._flush_period = int(flush_period)
        # After each periodic flush at most this many items remain in flight, so
        # with the next block added the bound is max_pending_items.
        self._block_until = max_pending_items - flush_period
        self._max_chunk_bytes = int(max_chunk_bytes)
        self._timeout_s = float(flush_timeout_s)
        self._timeout_ms = int(flush_timeout_s * 1000)
        self._cpp_writer = None  # The fast path, set after the first item.
        self._squeeze: List[bool] = []
        self._since_flush = 0
        self.num_items = 0  # Items created so far (confirmed or not).

    def write(self, flat: List[Any], priority: float) -> None:
        """Appends one step holding ``flat`` (one array per column) and an item referencing it."""
        if self._cpp_writer is not None:
            refs = self._cpp_writer.Append(flat)
            self._cpp_writer.CreateItem(self._table, priority, [[ref] for ref in refs], self._squeeze)
        else:
            self._first_write(flat, priority)
        self.num_items += 1
        self._since_flush += 1
        if self._since_flush >= self._flush_period:
            self._call(self._writer.flush, self._block_until, timeout_ms=self._timeout_ms)
            self._since_flush = 0

    def flush(self) -> None:
        """Blocks until every created item is confirmed by the server."""
        if self._writer is not None:
            self._call(self._writer.flush, 0, timeout_ms=self._timeout_ms)
            self._since_flush = 0

    def end_episode(self) -> None:
        """Ends the writer's episode (confirming its items); nothing to do before the first item."""
        if self._writer is not None:
            self._call(self._writer.end_episode, True, timeout_ms=self._timeout_ms)
        self._since_flush = 0

    def close(self) -> None:
        """Flushes created items and closes the writer (idempotent)."""
        if self._writer is None:
            return
        try:
            self.flush()
        finally:
            self._writer.close()
            self._writer = None
            self._cpp_writer = None

    def _first_write(self, flat: List[Any], priority: float) -> None:
        """First item: create/configure the writer via the public API."""
        if self._writer is None:
            nbytes = sum(np.asarray(x).nbytes for x in flat)
            chunk = max(1, min(self._flush_period, self._max_chunk_bytes // max(nbytes, 1)))
            # Items reference only the step just appended, so nothing older than
            # the chunk being built has to stay alive.
            self._writer = self._client.trajectory_writer(num_keep_alive_refs=chunk, validate_items=False)
            for i in range(len(flat)):
                self._writer.configure((i,), num_keep_alive_refs=chunk, max_chunk_length=chunk)
        self._writer.append(flat)
        self._writer.create_item(self._table, priority, [column[-1] for column in self._writer.history])
        # From now on talk to the C++ writer directly: the Python wrapper's
        # per-step structure bookkeeping costs about as much as the write itself
        # and buys nothing for fixed flat items (dm-reverb is pinned to 0.14).
        cpp = getattr(self._writer, "_writer", None)
        if hasattr(cpp, "Append") and hasattr(cpp, "CreateItem"):
            self._cpp_writer = cpp
        else:  # Unknown Reverb version: stay on the public API.
            self._cpp_writer = _PublicWriter(self._writer)
        self._squeeze = [True] * len(flat)

    def _call(self, fn, *args, **kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except reverb_client.errors.DeadlineExceededError as e:
            raise errors.insert_timeout(self._address, self._table, self._timeout_s) from e


class _PublicWriter:
    """Adapter giving a TrajectoryWriter the C++ Append/CreateItem interface."""

    def __init__(self, writer: reverb_client.TrajectoryWriter):
        self._writer = writer

    def Append(self, flat: List[Any]) -> List[Any]:  # pylint: disable=invalid-name
        self._writer.append(flat)
        return [column[-1] for column in self._writer.history]

    def CreateItem(self, table, priority, columns, squeeze):  # pylint: disable=invalid-name
        del squeeze  # The history columns are already squeezed.
        self._writer.create_item(table, priority, [c[0] for c in columns])
