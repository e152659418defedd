"""Replay layer: Reverb tables, servers, adders and tf.data pipelines.

The names below load on first use: an actor's process takes its adders from
here without the learner's ``tf.data`` pipelines, and so without TensorFlow
(``reverb_client``).
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module that defines it.
_WHERE = {
    "default_error_buffer": "tables",
    "fetch_signature": "datasets",
    "make_input_fn": "datasets",
    "make_prioritized_table": "tables",
    "make_queue_table": "tables",
    "make_rate_limiter": "tables",
    "make_server": "server",
    "make_transition_dataset": "datasets",
    "make_uniform_table": "tables",
    "next_batch": "datasets",
    "NStepTransitionAdder": "adders",
    "ReplayHandle": "server",
    "ReplayTimeoutError": "errors",
    "sequence_signature": "sequence_signature",
    "SequenceAdder": "sequence_adder",
    "SequenceStep": "sequence_signature",
    "Transition": "types",
    "transition_signature": "signature",
    "TransitionPacking": "packing",
    "translate_sampling_errors": "datasets",
    "validate_rate_limiter": "tables",
    "wait_for_server": "server",
    "wait_for_table_size": "datasets",
}

__all__ = sorted(_WHERE)  # noqa: PLE0605  (one list: the names above)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
