"""VectorNStepAdder: the n-step transitions of K environments stepped together.

Every environment (stream) gets exactly the items an ``NStepTransitionAdder``
of its own would write (same returns, discounts, bootstrap observations and
episode-end tails, bit for bit). What is shared is the arithmetic, so its
Python cost is paid once per step of all K rather than K times:

- the n-step windows live in [n, K, ...] ring buffers, and a step of the K
  streams is stored with one fancy-indexed assignment per field;
- the transitions that became complete are computed together, the return
  accumulated step by step over the window exactly as the single adder does
  (float64, the same operations in the same order), and packed into one
  [rows, size] float32 array with one concatenation.

The K streams also share one writer (``TransitionStream``): an item
references only the step appended just before it, so items of different
environments can follow each other in one writer, each stream's in its own
order. One writer instead of K costs about a quarter less CPU per item (one
gRPC stream and writer thread instead of K, a flush per ``flush_period``
items of all streams rather than of each). An episode end confirms the
items written so far (a flush, as the single adder's episode end does)
instead of ending the writer's episode, which the other streams are still
writing into. Packed transitions (``rlplat.replay.packing``) of array
observations and actions only: anything else uses one
``NStepTransitionAdder`` per environment.
"""

from __future__ import annotations

from typing import Any, Sequence

import dm_env
import numpy as np
import tree

from rlplat.replay import closing
from rlplat.replay import errors
from rlplat.replay.adders import check_first_step
from rlplat.replay.packing import TransitionPacking
from rlplat.replay.transition_stream import DEFAULT_MAX_PENDING_ITEMS, TransitionStream


class VectorNStepAdder(closing.ClosesOnExit):
    """Writes the n-step transitions of ``num_streams`` environments, each as its own adder would.

    Use: ``add_first(k, timestep)`` when stream k starts an episode; then, per
    step of streams 0..M-1 (M <= K, the first M, as ``rlplat.vector_loop``
    steps them), ``add(actions [M, ...], timesteps [M])``, where row k holds
    what stream k's ``NStepTransitionAdder.add`` would get.

    Args:
      client: a ``reverb.Client`` of the server.
      table: the table; it must hold ``packing.table_signature``.
      n_step, discount, priority, max_pending_items, max_chunk_bytes,
        flush_timeout_s, connect_timeout_s: as for ``NStepTransitionAdder``.
      flush_period: flush the shared writer every this many items (of all
        streams together).
      num_streams: K >= 1 environments.
      packing: the ``TransitionPacking`` of the table's items.
    """

    def __init__(self, client: Any, table: str, n_step: int, discount: float, num_streams: int, *,
                 packing: TransitionPacking, priority: float = 1.0, flush_period: int = 32,
                 max_pending_items: int = DEFAULT_MAX_PENDING_ITEMS, max_chunk_bytes: int = 16 * 1024,
                 flush_timeout_s: float = 60.0, connect_timeout_s: float = 30.0):
        if n_step < 1:
            raise ValueError(f"n_step={n_step} must be >= 1")
        if not 0.0 <= discount <= 1.0:
            raise ValueError(f"discount={discount} must be in [0, 1]")
        if num_streams < 1:
            raise ValueError(f"num_streams={num_streams} must be >= 1")
        signature = packing.signature
        if tree.is_nested(signature.observation) or tree.is_nested(signature.action):
            raise ValueError("VectorNStepAdder needs array observations and actions; "
                             "use one NStepTransitionAdder per environment")
        address = client.server_address
        self._stream = TransitionStream(client, table, address, flush_period=flush_period,
                                        max_pending_items=max_pending_items, max_chunk_bytes=max_chunk_bytes,
                                        flush_timeout_s=flush_timeout_s)
        packing.check_table(errors.table_info(address, table, connect_timeout_s).signature, table)
        self._table = table
        self._signature = signature
        self._n, self._k = int(n_step), int(num_streams)
        self._gamma = float(discount)
        self._priority = float(priority)
        obs_shape = tuple(signature.observation.shape)
        self._action_shape = tuple(signature.action.shape)
        n, k = self._n, self._k
        # Slot (head[k] + j) % n of stream k holds the j-th oldest step of its window.
        self._observations = np.zeros((n, k) + obs_shape, np.float32)
        self._actions = np.zeros((n, k) + self._action_shape, np.float32)
        self._rewards = np.zeros((n, k), np.float64)  # the single adder sums in Python floats
        self._discounts = np.zeros((n, k), np.float64)
        self._head = np.zeros(k, np.int64)
        self._count = np.zeros(k, np.int64)
        self._latest = np.zeros((k,) + obs_shape, np.float32)  # where each stream's next action is taken
        self._started = np.zeros(k, bool)
        self._rows = np.arange(k)
        self._checked = False
        self._closed = False

    @property
    def num_streams(self) -> int:
        """K."""
        return self._k

    @property
    def num_items(self) -> int:
        """Items created so far over all streams (confirmed or not)."""
        return self._stream.num_items

    def add_first(self, index: int, timestep: dm_env.TimeStep) -> None:
        """Stream ``index`` starts an episode at ``timestep``; an unfinished one is written as truncated."""
        if self._closed:
            raise RuntimeError("add_first() on a closed adder")
        if self._count[index]:
            self._write_tail(index)
            self._stream.flush()
        self._latest[index] = np.asarray(timestep.observation, np.float32)
        self._started[index] = True

    def add(self, actions: Any, timesteps: Sequence[dm_env.TimeStep]) -> None:
        """Records the actions of streams 0..M-1 and their outcomes; writes what became complete."""
        m = len(timesteps)
        if not self._started[:m].all():
            k = int(np.flatnonzero(~self._started[:m])[0])
            raise RuntimeError(f"add() called before add_first() for stream {k}")
        actions = np.asarray(actions, np.float32).reshape((m,) + self._action_shape)
        next_observations = np.asarray([ts.observation for ts in timesteps], np.float32)
        if not self._checked:
            self._check_first_step(actions[0], timesteps[0], next_observations[0])
        rows = self._rows[:m]
        slots = (self._head[:m] + self._count[:m]) % self._n
        self._observations[slots, rows] = self._latest[:m]
        self._actions[slots, rows] = actions
        self._rewards[slots, rows] = [ts.reward for ts in timesteps]
        self._discounts[slots, rows] = [ts.discount for ts in timesteps]
        self._count[:m] += 1
        self._latest[:m] = next_observations
        full = np.flatnonzero(self._count[:m] == self._n)
        if full.size:
            self._write_oldest(full, self._n)
        ended = [k for k, timestep in enumerate(timesteps) if timestep.last()]
        for k in ended:
            self._write_tail(k)
            self._started[k] = False
        if ended:
            self._stream.flush()

    def flush(self) -> None:
        """Blocks until every created item is confirmed by the server."""
        self._stream.flush()

    def close(self) -> None:
        """Flushes and closes the writer (idempotent); unfinished windows are dropped, as by the single adder."""
        self._closed = True
        self._count[:] = 0
        self._started[:] = False
        self._stream.close()

    def _write_oldest(self, streams: np.ndarray, steps: int) -> None:
        """Writes the oldest transition of each of ``streams``, whose windows all hold ``steps`` steps."""
        head = self._head[streams]
        ret = np.zeros(len(streams))
        scale = np.ones(len(streams))
        for j in range(steps):  # in time order, as NStepTransitionAdder's Horner-like loop
            slot = (head + j) % self._n
            ret += scale * self._rewards[slot, streams]
            scale *= self._gamma * self._discounts[slot, streams]
        rows = len(streams)
        packed = np.concatenate([
            self._observations[head, streams].reshape(rows, -1),
            self._actions[head, streams].reshape(rows, -1),
            ret.astype(np.float32)[:, None],
            scale.astype(np.float32)[:, None],
            self._latest[streams].reshape(rows, -1),
        ], axis=1)
        self._head[streams] = (head + 1) % self._n
        self._count[streams] -= 1
        for row in packed:
            self._stream.write([row], self._priority)

    def _write_tail(self, k: int) -> None:
        """Writes stream k's remaining transitions (the caller confirms them)."""
        streams = np.array([k])
        while self._count[k]:
            self._write_oldest(streams, int(self._count[k]))
        self._head[k] = 0

    def _check_first_step(self, action: np.ndarray, timestep: dm_env.TimeStep, next_observation: np.ndarray
                          ) -> None:
        """Checks one step against the table signature (one-line error), as the single adder does."""
        check_first_step(self._latest[0], action, timestep, next_observation, self._signature, self._table)
        self._checked = True
