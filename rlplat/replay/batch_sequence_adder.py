"""BatchSequenceAdder: the unrolls of K environments stepped together, one NumPy write per field.

Every environment (stream) gets exactly the items a ``SequenceAdder`` of its
own would write (the layout is in ``rlplat.replay.sequence_adder``'s
docstring: T transitions plus the bootstrap step, overlapping unrolls, the
final observation with mask 0 and zero padding at an episode end). What is
shared is the bookkeeping, so that its cost is paid once per step of all K
rather than K times:

- the unrolls in progress live in [K, T+1, ...] arrays, one per field, and a
  step of the K streams is written with ONE fancy-indexed assignment per
  field (row ``rows[k]`` of stream k), where ``SequenceAdder`` pays a Python
  row write per field per stream;
- one Reverb writer carries all K streams (an unroll is still one append and
  one item, see ``unroll_writer``), flushed once per step that wrote items.

Only the order in which different streams' items reach the table differs
from K separate adders (as it does between K separate actors anyway); within
a stream, items arrive in order. Observations and actions must be single
arrays and ``extras`` a flat dict of arrays (what IMPALA's actors record).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import dm_env
import numpy as np
from rlplat.replay import reverb_client
import tree

from rlplat.replay import closing
from rlplat.replay.sequence_adder import check_first_step, step_spec_of_table
from rlplat.replay.unroll_writer import UnrollWriter


class BatchSequenceAdder(closing.ClosesOnExit):
    """Writes the unrolls of ``num_streams`` environments, each as its own ``SequenceAdder`` would.

    Use: ``add_first(k, timestep)`` when stream k starts an episode; then, per
    step of streams 0..M-1 (M <= K, the first M streams, as
    ``rlplat.vector_loop`` steps them), ``add(actions [M, ...], timesteps
    [M], extras={key: [M, ...]}, behaviour_log_probs [M], policy_version)``,
    where row k holds what stream k's ``SequenceAdder.add`` would get.
    """

    def __init__(self, client: reverb_client.Client, table: str, unroll_length: int, num_streams: int, *,
                 signature: Optional[Any] = None, priority: float = 1.0,
                 max_in_flight_items: Optional[int] = None, insert_timeout_s: float = 300.0,
                 connect_timeout_s: float = 30.0):
        """Creates the adder and its writer.

        Args:
          client, table, unroll_length, signature, priority, insert_timeout_s,
            connect_timeout_s: as for ``SequenceAdder``.
          num_streams: K >= 1 environments.
          max_in_flight_items: items that may stay unconfirmed after each
            flush; None: one per stream, as K ``SequenceAdder``s allow.
        """
        if unroll_length < 1:
            raise ValueError(f"unroll_length={unroll_length} must be >= 1")
        if num_streams < 1:
            raise ValueError(f"num_streams={num_streams} must be >= 1")
        spec = step_spec_of_table(client, table, unroll_length, signature, connect_timeout_s)
        flat = (len(tree.flatten(spec.observation)) == 1 and len(tree.flatten(spec.action)) == 1
                and isinstance(spec.extras, dict) and all(not tree.is_nested(v) for v in spec.extras.values()))
        if not flat:
            raise ValueError(f"BatchSequenceAdder needs array observations and actions and flat dict extras "
                             f"(table {table!r} has {spec}); use one SequenceAdder per environment")
        self._table = table
        self._spec = spec
        self._k, self._n = int(num_streams), unroll_length + 1
        self._max_in_flight = num_streams if max_in_flight_items is None else int(max_in_flight_items)
        if self._max_in_flight < 0:
            raise ValueError(f"max_in_flight_items={max_in_flight_items} must be >= 0")
        self._keys = sorted(spec.extras)  # tree.flatten's order of a dict's leaves
        leaves = tree.flatten(spec)
        # Field f of stream k's unroll in progress is self._buffers[f][k]; the
        # fields are in tree.flatten order, so a stream's slice is an item's columns.
        self._buffers = [np.zeros((self._k, self._n) + tuple(s.shape), s.dtype.as_numpy_dtype) for s in leaves]
        self._obs = np.zeros((self._k,) + tuple(spec.observation.shape), np.float32)  # o_k per stream
        self._rows = np.zeros(self._k, np.int64)  # rows filled per stream
        self._started = np.zeros(self._k, bool)
        self._streams = np.arange(self._k)
        self._writer = UnrollWriter(client, table, len(leaves), priority=priority,
                                    insert_timeout_s=insert_timeout_s)
        self._checked = False
        self._closed = False
        self.num_items = 0

    @property
    def num_streams(self) -> int:
        return self._k

    def add_first(self, stream: int, timestep: dm_env.TimeStep) -> None:
        """Starts an episode of ``stream``; an unfinished previous one is written as truncated."""
        if self._closed:
            raise RuntimeError("add_first() on a closed adder")
        if self._rows[stream]:  # No LAST seen: bootstrap from its latest observation.
            self._end_unroll(stream)
            self._writer.flush(self._max_in_flight)
        # Writing into our own array copies it (environments may reuse theirs).
        self._obs[stream] = timestep.observation
        self._started[stream] = True

    def add(self, actions: np.ndarray, timesteps: Sequence[dm_env.TimeStep], *,
            extras: Dict[str, np.ndarray], behaviour_log_probs: np.ndarray, policy_version: int) -> None:
        """Records, for streams k = 0..M-1, action ``actions[k]`` and its outcome ``timesteps[k]``.

        ``extras[key][k]`` and ``behaviour_log_probs[k]`` are the behaviour
        policy's outputs at stream k's current observation; all M actions
        were chosen by the weights of ``policy_version``.
        """
        m = len(timesteps)
        if not self._started[:m].all():
            raise RuntimeError(f"add() for streams {np.flatnonzero(~self._started[:m]).tolist()} "
                               "before their add_first()")
        rewards = np.array([t.reward for t in timesteps], np.float32)
        discounts = np.array([t.discount for t in timesteps], np.float32)
        if not self._checked:
            first = timesteps[0]
            check_first_step(self._spec, self._table, self._obs[0], np.asarray(actions[0], np.float32),
                             first.reward, first.discount,
                             {key: np.asarray(extras[key][0], np.float32) for key in self._keys},
                             np.asarray(behaviour_log_probs[0], np.float32))
            self._checked = True
        streams, rows = self._streams[:m], self._rows[:m]  # rows: a view, updated in place
        values = (self._obs[:m], actions, rewards, discounts, *[extras[key] for key in self._keys],
                  behaviour_log_probs, policy_version, 1.0)
        for buffer, value in zip(self._buffers, values):
            buffer[streams, rows] = value
        rows += 1
        wrote = False
        for k in np.flatnonzero(rows == self._n):
            self._write(k)
            for buffer in self._buffers:  # The bootstrap step opens the next unroll.
                buffer[k, 0] = buffer[k, -1]
            rows[k] = 1
            wrote = True
        self._obs[:m] = [t.observation for t in timesteps]
        for k, timestep in enumerate(timesteps):
            if timestep.last():
                self._end_unroll(k)
                self._started[k] = False
                wrote = True
        if wrote:
            self._writer.flush(self._max_in_flight)

    def reset(self, stream: int) -> None:
        """Drops ``stream``'s episode in progress (its unfinished unroll is not written)."""
        self._rows[stream] = 0
        self._started[stream] = False

    def flush(self) -> None:
        """Blocks until every created item is confirmed by the server."""
        self._writer.flush(0)

    def close(self) -> None:
        """Flushes written items and closes the writer (idempotent); unfinished unrolls are dropped."""
        if self._closed:
            return
        self._closed = True
        self._rows[:] = 0
        self._started[:] = False
        try:
            self.flush()
        finally:
            self._writer.close()

    def _end_unroll(self, k: int) -> None:
        """Stream k's final-observation step (mask 0), zero padding to T+1, write."""
        row = self._rows[k]
        for buffer in self._buffers:  # Rows past ``row`` may hold an earlier unroll's steps.
            buffer[k, row:] = 0
        self._buffers[0][k, row] = self._obs[k]
        self._write(k)
        self._rows[k] = 0

    def _write(self, k: int) -> None:
        # Copies: the buffers are reused, the writer keeps what it is given.
        self._writer.write([buffer[k].copy() for buffer in self._buffers])
        self.num_items += 1
