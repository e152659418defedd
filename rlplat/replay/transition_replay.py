"""The replay of an n-step-transition agent (DDPG-like) in one object: its table, adder and learner input.

An agent whose actors write n-step ``Transition``s and whose learner samples them
uniformly needs the same three builder factories every time: a uniform FIFO table
rate-limited to ``samples_per_insert`` (validated so it cannot stall), an
``NStepTransitionAdder`` (or a ``VectorNStepAdder`` for a vector actor's K
streams) and a ``tf.data`` input function, all agreeing on the
item format (packed into one float32 vector by default, ``rlplat.replay.packing``).
``TransitionReplay`` holds those settings (plain values: it pickles) and makes
the three, so a builder's replay factories are one line each. The adders'
side imports no TensorFlow API (``reverb_client``): actors use it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Dict, List

from rlplat.replay import reverb_client
from rlplat.replay.adders import NStepTransitionAdder
from rlplat.replay.packing import TransitionPacking
from rlplat.replay.signature import transition_signature
from rlplat.replay.vector_nstep_adder import VectorNStepAdder

if TYPE_CHECKING:
    import reverb


@dataclasses.dataclass(frozen=True)
class TransitionReplay:
    """One uniform FIFO table of n-step transitions; ``discount`` is per step (items hold gamma^n)."""

    n_step: int
    discount: float
    samples_per_insert: float
    min_replay_size: int
    max_replay_size: int
    global_batch_size: int
    table: str = "transitions"
    pack: bool = True
    rate_limiter_timeout_ms: int = 300_000  # a learner's sample may wait this long for inserts

    @classmethod
    def from_config(cls, config: Any, **kwargs: Any) -> "TransitionReplay":
        """From an agent config with the fields of the same names (``n_step``, ``discount``, ...)."""
        names = ("n_step", "discount", "samples_per_insert", "min_replay_size", "max_replay_size",
                 "global_batch_size")
        return cls(**{name: getattr(config, name) for name in names}, **kwargs)

    def item_format(self, environment_spec: Any) -> Dict[str, Any]:
        """``signature`` (one column per field) and ``packing`` (None when unpacked) of the items."""
        obs, act = environment_spec.observations, environment_spec.actions
        return {"signature": transition_signature(obs, act),
                "packing": TransitionPacking.from_specs(obs, act) if self.pack else None}

    def learner_kwargs(self, replay_address: str) -> Dict[str, Any]:
        """What a ``ReplayFedLearner`` needs to watch this replay (dead server, rate-limiter timeout)."""
        return {"replay_address": replay_address, "replay_table": self.table,
                "rate_limiter_timeout_ms": self.rate_limiter_timeout_ms}

    def make_tables(self, environment_spec: Any, num_actors: int) -> List[reverb.Table]:
        """The table, its limiter validated against the batch and ``num_actors``."""
        from rlplat.replay import tables  # pylint: disable=g-import-not-at-top  (the server's side)

        tables.validate_rate_limiter(self.samples_per_insert, self.min_replay_size, self.global_batch_size,
                                     num_actors, max_replay_size=self.max_replay_size)
        limiter = tables.make_rate_limiter(self.samples_per_insert, self.min_replay_size,
                                           global_batch_size=self.global_batch_size, num_actors=num_actors)
        fmt = self.item_format(environment_spec)
        signature = fmt["signature"] if fmt["packing"] is None else fmt["packing"].table_signature
        return [tables.make_uniform_table(self.table, self.max_replay_size, limiter, signature)]

    def make_adder(self, replay_address: str, environment_spec: Any) -> NStepTransitionAdder:
        return NStepTransitionAdder(reverb_client.Client(replay_address), self.table, self.n_step, self.discount,
                                    **self.item_format(environment_spec))

    def make_vector_adder(self, replay_address: str, environment_spec: Any, num_streams: int) -> VectorNStepAdder:
        """``num_streams`` adders' streams in one ``VectorNStepAdder`` (packed items only)."""
        packing = self.item_format(environment_spec)["packing"]
        if packing is None:
            raise ValueError("a VectorNStepAdder writes packed transitions only (pack=True)")
        return VectorNStepAdder(reverb_client.Client(replay_address), self.table, self.n_step, self.discount,
                                num_streams, packing=packing)

    def make_input_fn(self, replay_address: str, environment_spec: Any) -> Callable[..., Any]:
        """Per-replica batches of ``Transition`` (``global_batch_size`` over all replicas)."""
        from rlplat.replay import datasets  # pylint: disable=g-import-not-at-top  (tf.data: the learner's side)

        return datasets.make_input_fn(replay_address, self.table, self.global_batch_size,
                                      rate_limiter_timeout_ms=self.rate_limiter_timeout_ms,
                                      **self.item_format(environment_spec))
