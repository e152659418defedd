"""Adders: turn an actor's (action, timestep) stream into replay items.

``NStepTransitionAdder`` computes n-step transitions itself, in the actor, and
writes ONE flat, already-finished transition per environment step (one
``append`` plus one ``create_item`` over that single step). Letting Reverb
assemble n-step items from its history would reference n+1 steps per item and
cost more per step than the arithmetic it saves; a learner sampling a flat
transition also gets it without any reassembly.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Deque, Optional, Tuple

import dm_env
import numpy as np
import tree

from rlplat.replay import closing
from rlplat.replay import errors
from rlplat.replay.packing import TransitionPacking
from rlplat.replay.signature import as_transition, check_against_signature
from rlplat.replay.transition_stream import DEFAULT_MAX_PENDING_ITEMS, TransitionStream
from rlplat.replay.types import Transition


# (observation, action, reward, env discount) of one step inside the window.
_Step = Tuple[Any, Any, float, float]


class NStepTransitionAdder(closing.ClosesOnExit):
    """Writes n-step transitions to a Reverb table, one item per env step.

    For the transition starting at step t, with m = min(n, steps left in the
    episode) and env discounts d (``timestep.discount``)::

      reward   = sum_{k<m} gamma^k * (d_t * ... * d_{t+k-1}) * r_{t+k}
      discount = gamma^m * d_t * ... * d_{t+m-1}
      next_observation = o_{t+m}

    so the learner's target is ``reward + discount * V(next_observation)``
    (``discount`` already includes gamma^m; do not apply gamma again). When the
    episode TERMINATES (last discount 0) every pending transition gets
    discount 0; when it is TRUNCATED (last discount > 0) they keep
    ``gamma^m * prod(d)`` and bootstrap from the final observation. At the end
    of an episode the m < n tail transitions are written too, so an episode of
    T steps yields exactly T items. Episodes never mix.

    Costs are bounded per step: the return is computed from an n-entry ring
    buffer, and the writer is flushed every ``flush_period`` items while keeping
    at most ``max_pending_items`` unconfirmed. Every wait has a timeout.
    """

    def __init__(
        self,
        client_or_writer: Any,
        table: str,
        n_step: int,
        discount: float,
        *,
        priority: float = 1.0,
        priority_fn: Optional[Callable[[Transition], float]] = None,
        signature: Optional[Any] = None,
        flush_period: int = 32,
        max_pending_items: int = DEFAULT_MAX_PENDING_ITEMS,
        max_chunk_bytes: int = 16 * 1024,
        flush_timeout_s: float = 60.0,
        connect_timeout_s: float = 30.0,
        server_address: Optional[str] = None,
        packing: Optional[TransitionPacking] = None,
    ):
        """Creates the adder.

        Args:
          client_or_writer: A ``reverb.Client`` (the adder creates and configures
            its own writer) or an existing ``reverb.TrajectoryWriter`` (used as
            is; pass ``server_address`` for error messages and ``signature`` for
            validation).
          table: Table to insert into.
          n_step: Number of steps to accumulate (>= 1).
          discount: The agent's gamma, in [0, 1].
          priority: Priority of every item (when ``priority_fn`` is None).
          priority_fn: Optional ``Transition -> float`` computing each priority.
          signature: The table signature to validate the first step against.
            None fetches it from the server (client only).
          flush_period: Flush the writer every this many items; also the chunk
            length for small transitions, so each flush sends one chunk per field.
          max_pending_items: Upper bound on items not yet confirmed by the server
            (must be >= flush_period).
          max_chunk_bytes: Chunks are kept under this size (a sampled item
            transfers its whole chunk, so big observations get short chunks).
          flush_timeout_s: Timeout of every flush (per block, episode end, close).
          connect_timeout_s: Timeout for reaching the server in ``__init__``.
          server_address: ``host:port`` used in error messages when a writer is
            passed (taken from the client otherwise).
          packing: Write each transition as ONE packed float32 vector (see
            ``rlplat.replay.packing``; about 2.5x cheaper per item). The table
            must have ``packing.table_signature``; ``signature`` then defaults
            to the packing's unpacked one, which validates the first step.
        """
        if n_step < 1:
            raise ValueError(f"n_step={n_step} must be >= 1")
        if not 0.0 <= discount <= 1.0:
            raise ValueError(f"discount={discount} must be in [0, 1]")
        self._table = table
        self._n = n_step
        self._gamma = float(discount)
        self._priority = float(priority)
        self._priority_fn = priority_fn
        is_client = hasattr(client_or_writer, "trajectory_writer")  # else a reverb.TrajectoryWriter
        address = client_or_writer.server_address if is_client else server_address or "<unknown address>"
        # The writer is made on the first item: its chunk length needs the item's size.
        self._stream = TransitionStream(client_or_writer, table, address, flush_period=flush_period,
                                        max_pending_items=max_pending_items,
                                        max_chunk_bytes=max_chunk_bytes, flush_timeout_s=flush_timeout_s)
        if is_client:
            info = errors.table_info(address, table, connect_timeout_s)
            if packing is not None:
                packing.check_table(info.signature, table)
            elif signature is None:
                signature = info.signature
        self._packing = packing
        if packing is not None and signature is None:
            signature = packing.signature
        self._signature = None if signature is None else as_transition(signature)

        self._window: Deque[_Step] = collections.deque()
        self._obs = None  # Observation the next action will be taken at.
        self._checked = False
        self._nested = False  # Set from the first step.
        self._closed = False

    @property
    def num_items(self) -> int:
        """Items created so far (confirmed or not)."""
        return self._stream.num_items

    def add_first(self, timestep: dm_env.TimeStep) -> None:
        """Starts an episode at ``timestep`` (a FIRST step).

        If the previous episode never received a LAST step, its pending
        transitions are written as truncated (bootstrapped from its latest
        observation) rather than dropped.
        """
        if self._closed:
            raise RuntimeError("add_first() on a closed adder")
        if self._window:
            self._write_tail()
            self._end_episode()
        self._obs = self._to_f32(timestep.observation)

    def add(self, action: Any, next_timestep: dm_env.TimeStep) -> None:
        """Records ``action`` and its outcome ``next_timestep``.

        Writes the transition that became complete (if any) and, when
        ``next_timestep`` is LAST, all remaining tail transitions, then flushes.
        """
        if self._obs is None:
            raise RuntimeError("add() called before add_first() for this episode")
        action = self._to_f32(action)
        next_obs = self._to_f32(next_timestep.observation)
        if not self._checked:
            self._check_first_step(action, next_timestep, next_obs)
        self._window.append(
            (self._obs, action, float(next_timestep.reward), float(next_timestep.discount))
        )
        self._obs = next_obs
        if len(self._window) == self._n:
            self._write_oldest()
        if next_timestep.last():
            self._write_tail()
            self._end_episode()
            self._obs = None

    def reset(self) -> None:
        """Drops the episode in progress without writing its pending steps."""
        self._window.clear()
        self._obs = None

    def flush(self) -> None:
        """Blocks until every created item is confirmed by the server."""
        self._stream.flush()

    def close(self) -> None:
        """Flushes created items and closes the writer (idempotent).

        Steps of an unfinished episode that do not yet form a transition are
        dropped.
        """
        self._closed = True
        self.reset()
        self._stream.close()

    def _write_oldest(self) -> None:
        # Horner-like accumulation over at most n scalars: cheaper in plain
        # Python than building NumPy arrays for n ~ 3-5.
        ret, scale = 0.0, 1.0
        for _, _, r, d in self._window:
            ret += scale * r
            scale *= self._gamma * d
        obs, action, _, _ = self._window.popleft()
        self._write(Transition(obs, action, np.float32(ret), np.float32(scale), self._obs))

    def _write_tail(self) -> None:
        while self._window:
            self._write_oldest()

    def _write(self, transition: Transition) -> None:
        priority = (
            self._priority if self._priority_fn is None else float(self._priority_fn(transition))
        )
        flat = tree.flatten(transition) if self._nested else list(transition)
        if self._packing is not None:
            flat = [self._packing.pack(flat)]
        self._stream.write(flat, priority)

    def _end_episode(self) -> None:
        self._stream.end_episode()

    def _to_f32(self, value: Any) -> Any:
        # Always copy: the window keeps observations for n steps and some
        # environments reuse (mutate) their observation buffers in place.
        if tree.is_nested(value):
            return tree.map_structure(lambda v: np.array(v, np.float32), value)
        return np.array(value, np.float32)

    def _check_first_step(self, action: Any, timestep: dm_env.TimeStep, next_obs: Any) -> None:
        """Checks the first step against the table signature (one-line error)."""
        sample = check_first_step(self._obs, action, timestep, next_obs, self._signature, self._table)
        self._nested = any(tree.is_nested(x) for x in sample)
        self._checked = True


def check_first_step(observation: Any, action: Any, timestep: dm_env.TimeStep, next_observation: Any,
                     signature: Optional[Transition], table: str) -> Transition:
    """Checks a step's transition fields: scalar reward and discount, and ``signature`` (None: skipped).

    Raises a one-line ValueError naming the field; returns the transition
    checked (reward and discount zero).
    """
    for name, value in (("reward", timestep.reward), ("discount", timestep.discount)):
        if value is None or np.shape(value) != ():
            shape = None if value is None else np.shape(value)
            raise ValueError(f"replay field {name!r}: got {shape}, expected a scalar")
    sample = Transition(observation, action, np.float32(0), np.float32(0), next_observation)
    if signature is not None:
        check_against_signature(sample, signature, table)
    return sample

