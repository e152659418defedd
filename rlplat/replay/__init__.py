"""Replay layer: Reverb tables, servers, adders and tf.data pipelines."""

from __future__ import annotations

from rlplat.replay.adders import NStepTransitionAdder
from rlplat.replay.datasets import fetch_signature
from rlplat.replay.datasets import make_input_fn
from rlplat.replay.datasets import make_transition_dataset
from rlplat.replay.datasets import next_batch
from rlplat.replay.datasets import translate_sampling_errors
from rlplat.replay.datasets import wait_for_table_size
from rlplat.replay.errors import ReplayTimeoutError
from rlplat.replay.packing import TransitionPacking
from rlplat.replay.server import ReplayHandle
from rlplat.replay.sequence_adder import SequenceAdder
from rlplat.replay.sequence_signature import SequenceStep
from rlplat.replay.sequence_signature import sequence_signature
from rlplat.replay.server import make_server
from rlplat.replay.server import wait_for_server
from rlplat.replay.signature import transition_signature
from rlplat.replay.tables import default_error_buffer
from rlplat.replay.tables import make_prioritized_table
from rlplat.replay.tables import make_queue_table
from rlplat.replay.tables import make_rate_limiter
from rlplat.replay.tables import make_uniform_table
from rlplat.replay.tables import validate_rate_limiter
from rlplat.replay.types import Transition

__all__ = [
    "NStepTransitionAdder",
    "ReplayHandle",
    "ReplayTimeoutError",
    "SequenceAdder",
    "SequenceStep",
    "Transition",
    "TransitionPacking",
    "annotations",
    "default_error_buffer",
    "fetch_signature",
    "make_input_fn",
    "make_prioritized_table",
    "make_queue_table",
    "make_rate_limiter",
    "make_server",
    "make_transition_dataset",
    "make_uniform_table",
    "next_batch",
    "sequence_signature",
    "transition_signature",
    "translate_sampling_errors",
    "validate_rate_limiter",
    "wait_for_server",
    "wait_for_table_size",
]
