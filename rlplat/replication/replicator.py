"""The Replicator: single-replica code, run on one device, N devices or N workers.

The gradient convention, stated once for the whole platform: a `step_fn`
computes the MEAN loss over its own per-replica batch, averages gradients
explicitly with `all_reduce(grads, "mean")`, and applies them with
`optimizer.apply_gradients(..., skip_gradients_aggregation=True)`. With equal
per-replica batches this is exactly the gradient of the mean loss over the
global batch, so N replicas at global batch B train like one device at B.
`wrap_optimizer` is the one-line alternative that does the same averaging
inside `apply_gradients`.

Batch-size names always say "global" or "per_replica".
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Union

import tensorflow as tf

from rlplat.replication import devices as devices_lib
from rlplat.replication import primitives

InputFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]
# Traces of replicated steps in this process. A steady run traces each step
# once; a count that keeps rising is retracing (a Python value or a new shape
# reaching the step), which costs seconds per call and leaks graph memory.
_TRACES = {"count": 0}


def trace_count() -> int:
    """How many times this process has traced a replicated step (``run``/``run_steps``)."""
    return _TRACES["count"]


_OUTPUT_REDUCTIONS = {
    "mean": tf.distribute.ReduceOp.MEAN,
    "sum": tf.distribute.ReduceOp.SUM,
}


class Replicator:
    """Runs a `step_fn` written for one replica on every replica of a strategy.

    Build it with `make_replicator()`. Create variables (models, optimizers)
    under `scope()`, feed inputs from `distribute(input_fn)`, and call
    `run(step_fn, *args)`; inside `step_fn` the primitives below (or the free
    functions of `rlplat.replication.primitives`) talk across replicas.
    """

    def __init__(self, strategy: tf.distribute.Strategy, eager: bool = False):
        if eager and strategy.num_replicas_in_sync != 1:
            raise devices_lib.ReplicationError(
                f"eager (debug) steps run on one device, not {strategy.num_replicas_in_sync} replicas; "
                "use one replica (and one learner worker) with --debug-eager")
        self._strategy = strategy
        self._eager = bool(eager)
        self._compiled: Dict[Any, Callable] = {}

    @property
    def eager(self) -> bool:
        """True when steps run eagerly (``make_replicator(eager=True)``), for debugging."""
        return self._eager

    # ----------------------------------------------------------------- topology
    @property
    def strategy(self) -> tf.distribute.Strategy:
        """The underlying `tf.distribute.Strategy`, for what this API lacks."""
        return self._strategy

    @property
    def num_replicas(self) -> int:
        """Replicas in sync, across all workers."""
        return self._strategy.num_replicas_in_sync

    @property
    def num_workers(self) -> int:
        """Processes taking part (1 unless multi-worker)."""
        return self._strategy.extended._num_workers if self.is_multi_worker else 1  # pylint: disable=protected-access

    @property
    def uses_gpus(self) -> bool:
        """True when this process's replicas compute on GPUs (``rlplat.precision`` asks)."""
        try:
            devices = self._strategy.extended.worker_devices
        except RuntimeError:  # the default strategy (one device): TF places ops on a GPU when one is visible
            return bool(tf.config.list_logical_devices("GPU"))
        return any("GPU" in str(d).upper() for d in devices)

    @property
    def is_multi_worker(self) -> bool:
        return isinstance(self._strategy, tf.distribute.MultiWorkerMirroredStrategy)

    @property
    def is_chief(self) -> bool:
        """True in the one process that keeps checkpoints and writes logs."""
        if not self.is_multi_worker:
            return True
        resolver = self._strategy.cluster_resolver
        task_type, task_id = resolver.task_type, resolver.task_id
        if task_type == "chief":
            return True
        has_chief = "chief" in resolver.cluster_spec().as_dict()
        return not has_chief and task_type == "worker" and task_id == 0

    def scope(self) -> contextlib.AbstractContextManager:
        """Variables created in this scope are mirrored on every replica."""
        return self._strategy.scope()

    def per_replica_batch_size(self, global_batch_size: int) -> int:
        """Splits a global batch evenly, or raises naming a size that would."""
        if global_batch_size % self.num_replicas:
            lower = global_batch_size - global_batch_size % self.num_replicas
            raise devices_lib.ReplicationError(
                f"global batch size {global_batch_size} does not divide over {self.num_replicas} "
                f"replicas; use a multiple of {self.num_replicas} such as {lower or self.num_replicas}")
        return global_batch_size // self.num_replicas

    # -------------------------------------------------------------------- input
    def distribute(self, input_fn: Union[InputFn, tf.data.Dataset]) -> Iterator:
        """Returns an iterator of per-replica batches.

        `input_fn(input_context)` is called once per worker and must return a
        dataset of PER-REPLICA batches (size from
        `input_context.get_per_replica_batch_size(global_batch_size)`), sharded
        by `input_context.input_pipeline_id` when there are several workers.
        Consecutive elements go to consecutive replicas. A `tf.data.Dataset` of
        GLOBAL batches is also accepted and split across replicas.

        tf.data's autotuning is switched off for these datasets unless they set
        it themselves (see ``_without_autotune``).
        """
        if isinstance(input_fn, tf.data.Dataset):
            return iter(self._strategy.experimental_distribute_dataset(_without_autotune(input_fn)))
        return iter(self._strategy.distribute_datasets_from_function(
            lambda context: _without_autotune(input_fn(context))))

    # ---------------------------------------------------------------------- run
    def run(self, step_fn: Callable, *args, reduce: Optional[str] = "mean") -> Any:
        """Runs `step_fn(*args)` on every replica; returns reduced outputs.

        The step is traced once into a `tf.function` and cached per `step_fn`.
        Per-replica outputs are combined with `reduce` ("mean" or "sum"), or
        returned as `PerReplica` values when `reduce` is None.
        """
        if self._eager:
            with _functions_run_eagerly():
                return self._make_replicated(step_fn, reduce)(*args)
        key = (step_fn, reduce)
        compiled = self._compiled.get(key)
        if compiled is None:
            replicated = self._make_replicated(step_fn, reduce)

            def counted(*inner):
                _TRACES["count"] += 1  # Python runs here only while tracing
                return replicated(*inner)

            compiled = tf.function(counted)
            self._compiled[key] = compiled
        return compiled(*args)

    def run_steps(self, step_fn: Callable, iterator: Iterator, num_steps: int,
                  reduce: Optional[str] = "mean") -> Any:
        """Runs `num_steps` steps on batches from `iterator` in one `tf.function` call.

        Saves the Python dispatch cost of a call per step (the orbit
        'steps_per_loop' idea). Returns the outputs of the last step; when
        they are a dict, ``input_wait_s`` is added: the seconds of this call
        spent waiting for ``next(iterator)`` (e.g. on replay's rate limiter),
        against which the call's wall time shows whether the learner is
        starved of data or bound by its own compute.
        """
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1 (got {num_steps})")
        if self._eager:
            replicated = self._make_replicated(step_fn, reduce)
            with _functions_run_eagerly():
                wait = 0.0
                for _ in range(int(num_steps)):
                    batch, waited = _timed_next(iterator)
                    wait += waited
                    outputs = replicated(batch)
            return _with_wait(outputs, wait)
        return self._steps_loop(step_fn, reduce)(iterator, tf.constant(num_steps, tf.int32))

    def trace_steps(self, step_fn: Callable, iterator: Iterator, reduce: Optional[str] = "mean") -> None:
        """Traces the function ``run_steps(step_fn, iterator, n, reduce)`` calls, without taking a step.

        The next ``run_steps`` with the same ``step_fn`` and ``reduce`` uses this
        trace, so a caller can trace while it would otherwise wait (a learner
        while its actors fill replay). Nothing is read from ``iterator``. The
        trace is TensorFlow's; its graph is still optimised on the first call.
        """
        if not self._eager:
            self._steps_loop(step_fn, reduce).get_concrete_function(iterator, tf.TensorSpec([], tf.int32))

    def _steps_loop(self, step_fn: Callable, reduce: Optional[str]) -> Callable:
        key = ("steps", step_fn, reduce)
        compiled = self._compiled.get(key)
        if compiled is None:
            replicated = self._make_replicated(step_fn, reduce)
            # Its own function, called only inside the loop, so the graph holds
            # one copy of the step to trace and optimise: the loop starts from
            # zeros of its outputs, not from a step taken before the loop.
            step = tf.function(replicated)

            @tf.function
            def loop(it, n):
                _TRACES["count"] += 1  # Python runs here only while tracing
                initial = _zero_outputs(step, it)
                if initial is None:  # outputs without a fixed shape: the first step gives them
                    batch, wait = _timed_next(it)
                    outputs = step(batch)
                    n -= 1
                else:
                    outputs, wait = initial, tf.constant(0.0, tf.float64)
                for _ in tf.range(n):
                    batch, waited = _timed_next(it)
                    wait += waited
                    outputs = step(batch)
                return _with_wait(outputs, wait)

            compiled = loop
            self._compiled[key] = compiled
        return compiled

    def _make_replicated(self, step_fn: Callable, reduce: Optional[str]) -> Callable:
        if reduce is not None and reduce not in _OUTPUT_REDUCTIONS:
            raise ValueError(f"unknown reduce {reduce!r}; use 'mean', 'sum' or None")

        def replicated(*args):
            outputs = self._strategy.run(step_fn, args=args)
            if reduce is None:
                return outputs
            op = _OUTPUT_REDUCTIONS[reduce]
            return tf.nest.map_structure(
                lambda x: self._strategy.reduce(op, x, axis=None), outputs)

        return replicated

    # ------------------------------------------------- in-step primitives
    # Thin aliases so a step_fn can use `repl.all_reduce(...)`; the free
    # functions in `primitives` are the same thing without a handle.
    @staticmethod
    def all_reduce(value: Any, op: str = "mean") -> Any:
        """See `primitives.all_reduce`."""
        return primitives.all_reduce(value, op)

    @staticmethod
    def all_gather(value: Any, axis: int = 0) -> Any:
        """See `primitives.all_gather`."""
        return primitives.all_gather(value, axis)

    @staticmethod
    def broadcast(value: Any) -> Any:
        """See `primitives.broadcast`."""
        return primitives.broadcast(value)

    @staticmethod
    def replica_id() -> tf.Tensor:
        """See `primitives.replica_id`."""
        return primitives.replica_id()

    # ---------------------------------------------------------------- optimizer
    @staticmethod
    def wrap_optimizer(optimizer: tf.keras.optimizers.Optimizer) -> tf.keras.optimizers.Optimizer:
        """Makes `optimizer.apply_gradients` average gradients over replicas.

        The same object is returned, so checkpoints of it are unchanged. Its
        built-in aggregation (a SUM in Keras) becomes a MEAN, so a step_fn that
        returns per-replica MEAN losses needs no explicit all-reduce.
        """
        return wrap_optimizer(optimizer)


def _without_autotune(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` with tf.data autotuning off, unless its options already say.

    The learner's pipelines have nothing to tune (Reverb samples, fixed
    prefetch), and the learner's step already keeps the cores busy. Worse, on
    TensorFlow 2.15 an autotuning iterator can take up to a minute to be
    freed: its destructor cancels and then joins the tuning thread, which can
    wake on the cancellation before the cancellation is marked done and go
    back to sleep for the rest of its period (which doubles up to 60 s). Caught in the
    test suite's teardowns with gdb: 36-108 s per stall, four per run. With
    several replicas, tf.distribute's per-device pipelines still autotune
    (TensorFlow sets their options); only the host pipeline is covered here.
    """
    if dataset.options().autotune.enabled is not None:
        return dataset
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


@tf.autograph.experimental.do_not_convert  # TF ops only; AutoGraph would rewrite it for nothing
def _timed_next(iterator):
    """``next(iterator)`` and the seconds it took (ordered by control dependencies in a graph)."""
    start = tf.timestamp()
    with tf.control_dependencies([start]):
        batch = next(iterator)
    with tf.control_dependencies([t for t in tf.nest.flatten(batch, expand_composites=True)
                                  if isinstance(t, tf.Tensor)]):
        return batch, tf.timestamp() - start


@tf.autograph.experimental.do_not_convert  # plain Python over specs: nothing for AutoGraph to rewrite
def _zero_outputs(step, iterator):
    """Zeros shaped as ``step``'s outputs on ``iterator``'s batches (tracing ``step`` once); None if they cannot be.

    None where an output is not a tensor of a fully known shape (e.g.
    per-replica values), or the iterator has no ``element_spec``.
    """
    spec = getattr(iterator, "element_spec", None)
    if spec is None:
        return None
    outputs = step.get_concrete_function(spec).structured_outputs
    leaves = tf.nest.flatten(outputs, expand_composites=False)
    if not all(isinstance(t, tf.Tensor) and t.shape.is_fully_defined() for t in leaves):
        return None
    return tf.nest.map_structure(lambda t: tf.zeros(t.shape, t.dtype), outputs)


@tf.autograph.experimental.do_not_convert  # a dict update: nothing for AutoGraph to rewrite
def _with_wait(outputs, wait):
    if isinstance(outputs, dict) and "input_wait_s" not in outputs:
        return {**outputs, "input_wait_s": wait}
    return outputs


@contextlib.contextmanager
def _functions_run_eagerly():
    """Every ``tf.function`` called inside (a learner's own helpers too) runs as Python.

    TensorFlow's switch is process-wide, so it is set only around an eager
    step and put back after it: a breakpoint anywhere under ``step_fn`` stops
    there, with tensors that print their values.
    """
    before = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(before)


def wrap_optimizer(optimizer: tf.keras.optimizers.Optimizer) -> tf.keras.optimizers.Optimizer:
    """See `Replicator.wrap_optimizer`."""
    if not isinstance(optimizer, tf.keras.optimizers.Optimizer) or isinstance(
            optimizer, tf.keras.optimizers.legacy.Optimizer):
        raise TypeError(
            f"wrap_optimizer takes a Keras 2 optimizer from tf.keras.optimizers, got "
            f"{type(optimizer).__name__}; legacy optimizers: average gradients with all_reduce instead")
    if getattr(optimizer, "_rlplat_mean_aggregation", False):
        return optimizer
    base = type(optimizer)
    # Swapping in a subclass keeps every attribute, slot and checkpoint key of
    # the instance while changing the one method Keras uses to aggregate.
    optimizer.__class__ = type(f"MeanAggregated{base.__name__}", (base,), {
        "aggregate_gradients": _mean_aggregate_gradients,
        "_rlplat_mean_aggregation": True,
    })
    return optimizer


def _mean_aggregate_gradients(self, grads_and_vars):
    del self
    grads_and_vars = list(grads_and_vars)
    grads = primitives.all_reduce([g for g, _ in grads_and_vars], "mean")
    return list(zip(grads, [v for _, v in grads_and_vars]))


def make_replicator(num_replicas: Optional[int] = None,
                    devices: Optional[Sequence[str]] = None,
                    tpu: Optional[str] = None,
                    collective_timeout_s: Optional[float] = None, eager: bool = False) -> Replicator:
    """Builds the Replicator for this process (see `devices.make_strategy`).

    ``eager=True`` (one replica only) runs every step as plain Python through
    the same `step_fn` and the same strategy calls, so a debugger can stop
    inside it; results match the compiled step's.

    Create one per process, after `TF_CONFIG` is set. On a CPU-only machine
    `num_replicas=N` splits the CPU into N logical devices, which must happen
    before TensorFlow runs its first op. `collective_timeout_s` bounds each
    cross-worker collective under MultiWorkerMirroredStrategy.
    """
    return Replicator(devices_lib.make_strategy(num_replicas=num_replicas, devices=devices, tpu=tpu,
                                                collective_timeout_s=collective_timeout_s),
                      eager=eager)
