"""Cross-replica primitives, called from inside a `step_fn`.

They work in whatever replica context `Replicator.run` (or any
`strategy.run`) provides, and are exact on one replica, so single-replica code
and N-replica code are the same code. All take nests (lists, dicts, tuples) of
tensors as well as single tensors.

TF 2.15's `ReplicaContext` only reduces with SUM or MEAN and has no broadcast;
MAX, MIN and broadcast are built here on `all_gather`, which is exact for any
dtype (no arithmetic touches the values).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

# TensorFlow ops only, no Python control flow on tensors: AutoGraph would rewrite these
# functions for nothing, on every learner's first trace (docs/measurements.md).
_NOT_CONVERTED = tf.autograph.experimental.do_not_convert


_REDUCE_OPS = ("sum", "mean", "max", "min")


def _context() -> tf.distribute.ReplicaContext:
    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        raise RuntimeError(
            "cross-replica primitives must be called inside a step_fn run by "
            "Replicator.run (a replica context), not in cross-replica code")
    return ctx


@_NOT_CONVERTED
def replica_id() -> tf.Tensor:
    """This replica's index in [0, num_replicas), global across workers."""
    return tf.convert_to_tensor(_context().replica_id_in_sync_group, tf.int32)


@_NOT_CONVERTED
def num_replicas() -> int:
    """The number of replicas in sync, across all workers (a Python int)."""
    return _context().num_replicas_in_sync


@_NOT_CONVERTED
def all_reduce(value: Any, op: str = "mean") -> Any:
    """Reduces `value` (a nest) over replicas with `op` in sum|mean|max|min."""
    if op not in _REDUCE_OPS:
        raise ValueError(f"unknown all_reduce op {op!r}; use one of {', '.join(_REDUCE_OPS)}")
    ctx = _context()
    if op in ("sum", "mean"):
        reduce_op = tf.distribute.ReduceOp.SUM if op == "sum" else tf.distribute.ReduceOp.MEAN
        return ctx.all_reduce(reduce_op, value)
    stacked = _stack_over_replicas(ctx, value)
    reducer = tf.reduce_max if op == "max" else tf.reduce_min
    return tf.nest.map_structure(lambda x: reducer(x, axis=0), stacked)


@_NOT_CONVERTED
def all_gather(value: Any, axis: int = 0) -> Any:
    """Concatenates each replica's `value` along `axis`, in replica order."""
    return _context().all_gather(value, axis=axis)


@_NOT_CONVERTED
def broadcast(value: Any) -> Any:
    """Every replica gets replica 0's `value` (bit-exact, any dtype)."""
    stacked = _stack_over_replicas(_context(), value)
    return tf.nest.map_structure(lambda x: x[0], stacked)


def _stack_over_replicas(ctx: tf.distribute.ReplicaContext, value: Any) -> Any:
    # A new leading axis makes scalars gatherable and keeps replicas apart.
    expanded = tf.nest.map_structure(lambda x: tf.expand_dims(tf.convert_to_tensor(x), 0), value)
    return ctx.all_gather(expanded, axis=0)
