"""SequenceAdder: fixed-length unrolls for IMPALA-style learners, on a Reverb queue.

Item layout (T = ``unroll_length``; steps k = 0..T; fields ``SequenceStep``).
Step k holds observation o_k, the action a_k taken there, the reward and env
discount of o_k -> o_{k+1}, the behaviour policy's ``extras`` and
``behaviour_log_prob`` at o_k, the ``policy_version`` that chose a_k, and
``mask`` = 1. Step T is the bootstrap step: it is ALSO step 0 of the next
unroll, so consecutive unrolls of an episode overlap by exactly one step.

Episode ends. An unroll never spans two episodes. When the episode ends after
the transition of step j (LAST timestep): step j+1 holds the episode's final
observation with ``mask`` 0 and zeros in every other field, steps j+2..T are
all zeros (``mask`` 0), the item is written, and the next episode starts a
fresh unroll at its first observation. Step j keeps the env discount:
0 = termination, > 0 = truncation (time limit). Every item's step 0 is real.

Learner recipe (time-major, after transposing the [B, T+1] batch)::

  values = V(observation)                        # [T+1, B]
  vtrace(v_tm1=values[:-1], v_t=values[1:], r_t=reward[:-1],
         discount_t=gamma * discount[:-1], log_rho_tm1=log_pi[:-1] - behaviour_log_prob[:-1],
         mask_t=mask[:-1])

so a truncated episode bootstraps from V(its final observation) and the
trace stops there (``mask`` of the next step is 0); a terminated one does not
bootstrap (discount 0). The next episode is never in the same item.

Cost. The adder fills each unroll in NumPy arrays of T+1 rows and hands the
writer the whole unroll at once: one append of the [T+1, ...] arrays as a
single step and one item over it (squeezed, so the item's fields are
[T+1, ...] as the signature says). A Reverb append costs ~40 us whatever its
size, against ~8 us for a CartPole step, so paying it once per unroll rather
than once per frame is what lets an actor run near the environment's speed.
The bootstrap step is written into both unrolls it belongs to, so a sampled
unroll transfers only its own T+1 rows. The writer is flushed once per item.
With a queue table, inserts block while the queue is full (back-pressure on
actors): that is normal, but every wait has ``insert_timeout_s``.
"""

from __future__ import annotations

from typing import Any, List, Optional

import dm_env
import numpy as np
from rlplat.replay import reverb_client
import tree

from rlplat.replay import closing
from rlplat.replay import errors
from rlplat.replay.sequence_signature import (
    SequenceStep,
    as_sequence_step,
    step_signature,
    unroll_length_of,
)
from rlplat.replay.signature import check_against_signature
from rlplat.replay.unroll_writer import UnrollWriter, queue_insert_timeout  # noqa: F401  (re-exported)


def _to_f32(value: Any) -> Any:
    # Always copy: the observation is kept until the next step and some
    # environments mutate their observation buffers in place.
    return tree.map_structure(lambda v: np.array(v, np.float32), value)


def step_spec_of_table(client: reverb_client.Client, table: str, unroll_length: int, signature: Optional[Any],
                       connect_timeout_s: float) -> SequenceStep:
    """The spec of ONE step of ``table``'s unrolls, after checking it holds unrolls of ``unroll_length``.

    ``signature`` None fetches the table's (which also checks the server is reachable).
    """
    info = errors.table_info(client.server_address, table, connect_timeout_s)
    signature = as_sequence_step(info.signature if signature is None else signature)
    if not isinstance(signature, SequenceStep):
        raise ValueError(
            f"replay table {table!r} has no sequence signature; create it with "
            f"sequence_signature(obs_spec, action_spec, extras_spec, {unroll_length})"
        )
    if unroll_length_of(signature) != unroll_length:
        raise ValueError(
            f"unroll_length={unroll_length} but table {table!r} holds unrolls of "
            f"{unroll_length_of(signature)}; use the same unroll_length for both"
        )
    return step_signature(signature)


def check_first_step(step_spec: SequenceStep, table: str, observation: Any, action: Any, reward: Any,
                     discount: Any, extras: Any, behaviour_log_prob: Any) -> None:
    """Checks one step's values against the table's step spec (one-line error)."""
    for name, value in (("reward", reward), ("discount", discount),
                        ("behaviour_log_prob", behaviour_log_prob)):
        if value is None or np.shape(value) != ():
            shape = None if value is None else np.shape(value)
            raise ValueError(f"replay field {name!r}: got {shape}, expected a scalar")
    sample = SequenceStep(observation, action, np.float32(0), np.float32(0), extras, np.float32(0),
                          np.int64(0), np.float32(1))
    check_against_signature(sample, step_spec, table)


def _flat_keys(observation: Any, action: Any, extras: Any) -> Optional[List[str]]:
    """Sorted extras keys when observation and action are arrays and extras a flat dict of arrays.

    ``tree.flatten`` orders a dict by its sorted keys, so the fast path
    writes the same leaves in the same order. None: keep walking the nests.
    """
    simple = (isinstance(observation, np.ndarray) and isinstance(action, np.ndarray)
              and isinstance(extras, dict) and all(isinstance(v, np.ndarray) for v in extras.values()))
    return sorted(extras) if simple else None


class SequenceAdder(closing.ClosesOnExit):
    """Writes unrolls of T transitions (+ the bootstrap step) to a Reverb table.

    Use: ``add_first(timestep)``, then per env step
    ``add(action, next_timestep, extras=..., behaviour_log_prob=...,
    policy_version=...)``, where ``extras`` and ``behaviour_log_prob`` are the
    behaviour policy's outputs at the observation ``action`` was taken at.
    """

    def __init__(
        self,
        client: reverb_client.Client,
        table: str,
        unroll_length: int,
        *,
        signature: Optional[Any] = None,
        priority: float = 1.0,
        max_in_flight_items: int = 1,
        insert_timeout_s: float = 300.0,
        connect_timeout_s: float = 30.0,
    ):
        """Creates the adder and its writer.

        Args:
          client: A ``reverb.Client`` of the replay server.
          table: Table to insert into (normally ``make_queue_table``).
          unroll_length: T >= 1; must match the table's signature.
          signature: ``sequence_signature(...)`` of the table; None fetches it.
          priority: Priority of every item (ignored by queues).
          max_in_flight_items: Items that may stay unconfirmed after each
            per-item flush (0 = every insert is synchronous). 1 lets the actor
            collect the next unroll while the previous one is in transit.
          insert_timeout_s: Timeout of every blocking wait (per-item flush,
            episode end, close). Long by default: a full queue blocks actors
            until the learner catches up.
          connect_timeout_s: Timeout for reaching the server in ``__init__``.
        """
        if unroll_length < 1:
            raise ValueError(f"unroll_length={unroll_length} must be >= 1")
        if max_in_flight_items < 0:
            raise ValueError(f"max_in_flight_items={max_in_flight_items} must be >= 0")
        self._table = table
        self._n = unroll_length + 1  # Steps per item.
        self._max_in_flight = max_in_flight_items
        self._step_spec = step_spec_of_table(client, table, unroll_length, signature, connect_timeout_s)
        leaves = tree.flatten(self._step_spec)
        self._zeros = [np.zeros(s.shape, s.dtype.as_numpy_dtype) for s in leaves]
        self._num_obs = len(tree.flatten(self._step_spec.observation))
        self._writer = UnrollWriter(client, table, len(leaves), priority=priority,
                                    insert_timeout_s=insert_timeout_s)
        self._rows = 0  # Steps of the unroll in progress (rows filled in the buffers).
        self._buffers = self._new_buffers()
        self._obs: Any = None  # o_k (float32 copy), awaiting its action.
        self._checked = False
        # Sorted extras keys once the first step showed flat data (the fast path).
        self._extras_keys: Optional[List[str]] = None
        self._closed = False
        self.num_items = 0

    def add_first(self, timestep: dm_env.TimeStep) -> None:
        """Starts an episode. An unfinished previous one is written as truncated."""
        if self._closed:
            raise RuntimeError("add_first() on a closed adder")
        if self._rows:  # No LAST seen: bootstrap from its latest observation.
            self._finish_unroll()
            self._end_episode()
        self._obs = _to_f32(timestep.observation)

    def add(
        self,
        action: Any,
        next_timestep: dm_env.TimeStep,
        *,
        extras: Any,
        behaviour_log_prob: float,
        policy_version: int,
    ) -> None:
        """Records a_k (taken at the current observation) and its outcome."""
        if self._obs is None:
            raise RuntimeError("add() called before add_first() for this episode")
        keys = self._extras_keys
        if keys is not None:
            # Flat observation and action, extras a flat dict: no tree walks and
            # no copies (writing a row into the unroll's buffers copies and casts).
            flat = [self._obs, action, next_timestep.reward, next_timestep.discount,
                    *[extras[k] for k in keys], behaviour_log_prob, policy_version, 1.0]
        else:
            action, extras = _to_f32(action), _to_f32(extras)
            if not self._checked:
                self._check_first_step(action, next_timestep, extras, behaviour_log_prob)
                self._extras_keys = _flat_keys(self._obs, action, extras)
            flat = (
                tree.flatten(self._obs)
                + tree.flatten(action)
                + [np.float32(next_timestep.reward), np.float32(next_timestep.discount)]
                + tree.flatten(extras)
                + [np.float32(behaviour_log_prob), np.int64(policy_version), np.float32(1.0)]
            )
        self._append(flat)
        if self._rows == self._n:
            self._write_item()
            self._append(flat)  # The bootstrap step opens the next unroll.
        self._obs = _to_f32(next_timestep.observation) if keys is None else np.array(
            next_timestep.observation, np.float32)
        if next_timestep.last():
            self._finish_unroll()
            self._end_episode()
            self._obs = None

    def reset(self) -> None:
        """Drops the episode in progress (its unfinished unroll is not written)."""
        if self._rows:
            self._end_episode()
        self._obs = None

    def flush(self) -> None:
        """Blocks until every created item is confirmed by the server."""
        self._writer.flush(0)

    def close(self) -> None:
        """Flushes written items and closes the writer (idempotent).

        An unfinished unroll is dropped; call ``add_first`` of a next episode
        (or end the episode) first to keep it.
        """
        if self._closed:
            return
        self._closed = True
        self._rows, self._obs = 0, None
        try:
            self.flush()
        finally:
            self._writer.close()

    def _finish_unroll(self) -> None:
        """Final-observation step (mask 0), zero padding to T+1 (the buffers' zeros), write."""
        final = list(self._zeros)
        final[: self._num_obs] = tree.flatten(self._obs)
        self._append(final)
        self._write_item()

    def _new_buffers(self) -> List[np.ndarray]:
        return [np.zeros((self._n,) + z.shape, z.dtype) for z in self._zeros]

    def _append(self, flat: List[Any]) -> None:
        row = self._rows
        for buffer, value in zip(self._buffers, flat):
            buffer[row] = value
        self._rows = row + 1

    def _write_item(self) -> None:
        """One append of the whole unroll, one item over it, one flush."""
        unroll, self._buffers, self._rows = self._buffers, self._new_buffers(), 0
        self._writer.write(unroll)
        self.num_items += 1
        self._writer.flush(self._max_in_flight)

    def _end_episode(self) -> None:
        if self._rows:
            self._buffers, self._rows = self._new_buffers(), 0
        self._writer.end_episode()

    def _check_first_step(self, action, timestep, extras, behaviour_log_prob) -> None:
        check_first_step(self._step_spec, self._table, self._obs, action, timestep.reward,
                         timestep.discount, extras, behaviour_log_prob)
        self._checked = True
