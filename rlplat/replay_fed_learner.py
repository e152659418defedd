"""The scaffolding every replay-fed learner shares, so an agent writes only its step.

A ``ReplayFedLearner`` runs ``steps_per_call`` replicated steps per call on
batches from a Reverb-fed iterator, under the dead-server watchdog
(``utils.watchdog.run_replay_fed``: a replay server that dies cannot hang the
call), raises the NaN guard's one-line error after a call that skipped a
non-finite step, counts learner steps in Python between calls
(``utils.variable_export.StepMirror``: no TensorFlow op per read) and serves
its policy variables to actors as NumPy arrays, one export per version
(``utils.variable_export.VariableExport``).

An agent's learner resolves its precision (``_resolve_precision``), builds its
networks, optimizers, ``step_counter`` and ``NonFiniteGuard``
(``_make_step_counter``) under ``replicator.scope()``, calls ``_serve`` with the
variables actors need, and implements ``_step_fn`` (one replica's step,
incrementing ``step_counter``; ``_apply_mean_gradients`` does the all-reduce,
clipping, NaN guard, update and increment for it) and ``checkpointables``, and
overrides ``step`` when a call must stop early (e.g. at a target-network copy).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

from rlplat import core
from rlplat import precision as precision_lib
from rlplat import replication
from rlplat.replay.datasets import DEFAULT_RATE_LIMITER_TIMEOUT_MS
from rlplat.utils import nonfinite
from rlplat.utils import variable_export
from rlplat.utils import watchdog
from rlplat.utils.optimizers import apply_gradients_cross_replica


class ReplayFedLearner(core.Learner):
    """Base of learners fed from replay through a ``Replicator``.

    Args (the defaults suit an in-memory iterator; a learner fed by Reverb passes its address):
      replicator: where the step runs.
      iterator: per-replica batches (``replicator.distribute(input_fn)``).
      steps_per_call: replicated steps per call (amortises ~1 ms of Python
        dispatch per call).
      replay_address, replay_table: enable the dead-server watchdog and the
        "replay ran dry" translation; None for in-memory iterators.
      rate_limiter_timeout_ms: the dataset's rate-limiter timeout, for the
        error message when sampling runs dry.
      step_timeout_s: how long a call may run before the server is probed.
    """

    #: The agent's name in the NaN guard's message ("D4PG: ...").
    NAME = "learner"
    #: Guarded part -> the flag to change when it goes non-finite ("*": any).
    FIXES: Mapping[str, str] = {}

    step_counter: tf.Variable
    _guard: nonfinite.NonFiniteGuard
    precision: Optional[precision_lib.Resolved] = None  # set by _resolve_precision

    # AutoGraph converts ``_step_fn`` (and what it calls) in each learner process's first trace, so
    # a Python ``if`` on a tensor works there. An agent whose step has no such control flow sets
    # this False: the conversion, a large share of that trace, is skipped (docs/measurements.md).
    STEP_AUTOGRAPH = True

    def __init__(self, replicator: Any, iterator: Iterator, *, steps_per_call: int = 8,
                 replay_address: Optional[str] = None, replay_table: Optional[str] = None,
                 rate_limiter_timeout_ms: int = DEFAULT_RATE_LIMITER_TIMEOUT_MS, step_timeout_s: float = 60.0):
        if steps_per_call < 1:
            raise ValueError(f"steps_per_call must be >= 1 (got {steps_per_call})")
        self._repl = replicator
        self._iterator = iterator
        self._steps_per_call = int(steps_per_call)
        self._replay = (replay_address, replay_table) if replay_address else None
        self._rate_limiter_timeout_ms = rate_limiter_timeout_ms
        self._step_timeout_s = float(step_timeout_s)
        self._runner = watchdog.CallRunner()
        self._steps: Optional[variable_export.StepMirror] = None
        self._export: Optional[variable_export.VariableExport] = None
        # One callable object: the Replicator caches per step_fn.
        self._step = (self._step_fn if self.STEP_AUTOGRAPH
                      else tf.autograph.experimental.do_not_convert(self._step_fn))

    def _resolve_precision(self, config: Any) -> precision_lib.Resolved:
        """``config.precision`` resolved for this learner (its devices, this CPU, the agent's declared parity:
        ``rlplat.precision``); kept as ``self.precision`` for the run's record."""
        self.precision = precision_lib.resolve(config.precision, bf16_parity=precision_lib.bf16_parity(config),
                                               gpu=self._repl.uses_gpus)
        return self.precision

    def _make_step_counter(self, guarded: Sequence[str]) -> None:
        """``step_counter`` (int64, checkpointed) and the NaN guard watching ``guarded``; under ``scope()``."""
        self.step_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="learner_steps",
                                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self._guard = nonfinite.NonFiniteGuard(guarded)

    def _serve(self, policy_variables: Sequence[tf.Variable]) -> None:
        """Starts counting steps and serving ``policy_variables``; call once they exist."""
        self._steps = variable_export.StepMirror(self.step_counter)
        self._export = variable_export.VariableExport(list(policy_variables))

    def _step_fn(self, batch: Any) -> Dict[str, tf.Tensor]:
        """One replica's step on ``batch``; increments ``step_counter``; returns metrics."""
        raise NotImplementedError

    def _apply_mean_gradients(self, losses: Sequence[tf.Tensor], updates: Sequence[Tuple[Any, Sequence, Sequence]],
                              max_gradient_norm: float = 0.0,
                              after_apply: Optional[Callable[[], None]] = None) -> Tuple[tf.Tensor, List[tf.Tensor]]:
        """The platform's update, from one replica's step (replica context).

        One ``all_reduce(..., "mean")`` of the per-replica mean ``losses`` and of each gradient
        list; each list clipped to global norm ``max_gradient_norm`` (0: off) AFTER it, so N
        replicas train like one; then, through the NaN guard (watching the mean losses, then
        the gradient norms, in that order), every ``(optimizer, variables, gradients)`` of
        ``updates`` is applied (``apply_gradients_cross_replica``), ``after_apply()`` runs (e.g.
        target-network updates, in cross-replica context) and ``step_counter`` grows by one.
        Returns the mean losses [len(losses)] and the unclipped gradient norms, one per update.
        """
        *grads, mean_losses = replication.all_reduce([list(g) for _, _, g in updates] + [tf.stack(losses)], "mean")
        norms = [tf.linalg.global_norm(g) for g in grads]
        if max_gradient_norm:
            grads = [tf.clip_by_global_norm(g, max_gradient_norm, use_norm=n)[0] for g, n in zip(grads, norms)]

        def apply(strategy, grads):
            for (optimizer, variables, _), g in zip(updates, grads):
                apply_gradients_cross_replica(optimizer, strategy, zip(g, variables))
            if after_apply is not None:
                after_apply()
            # The counter labels the weights actors pull: read the updated variables first.
            with tf.control_dependencies([v.read_value() for _, variables, _ in updates for v in variables]):
                self.step_counter.assign_add(1)

        self._guard.apply_if_finite(tf.unstack(mean_losses) + norms, self.step_counter, apply, grads)
        return mean_losses, norms

    def _run_steps(self, n: int) -> Dict[str, float]:
        """Runs ``n`` steps; returns the last step's metrics and ``learner_steps``.

        Raises:
          FloatingPointError: a guarded value was NaN/Inf at some step; it and
            the rest of the call were skipped (weights unchanged since).
          ReplayTimeoutError: replay ran dry past the timeout, or the server died.
        """
        start = self.num_steps
        try:
            metrics = watchdog.run_replay_fed(
                self._runner, lambda: self._repl.run_steps(self._step, self._iterator, n),
                self._replay, self._step_timeout_s, self._rate_limiter_timeout_ms)
            self._guard.raise_if_tripped(self.NAME, dict(self.FIXES))
        except BaseException:
            self._mirror().invalidate()  # some of the n steps may have been skipped
            raise
        self._mirror().set(start + n)
        out = {k: float(v) for k, v in metrics.items()}
        out["learner_steps"] = float(start + n)
        return out

    def step(self) -> Dict[str, float]:
        """``steps_per_call`` steps (see ``_run_steps``); learners that must cut calls override it."""
        return self._run_steps(self._steps_per_call)

    def trace(self) -> None:
        """Traces the step ``_run_steps`` runs, taking none; the first ``step`` then skips the trace."""
        self._repl.trace_steps(self._step, self._iterator)

    def _mirror(self) -> variable_export.StepMirror:
        if self._steps is None:
            raise RuntimeError(f"{type(self).__name__} never called _serve()")
        return self._steps

    @property
    def num_steps(self) -> int:
        """Learner steps taken so far (restored with a checkpoint)."""
        return self._mirror().value

    def get_variables(self, names: Sequence[str]) -> Tuple[int, Dict[str, list]]:
        """(learner step, {"policy": the served arrays}), cached per version.

        Many actors pulling between two learner calls cost one device-to-host copy.
        """
        unknown = [n for n in names if n != "policy"]
        if unknown:
            raise ValueError(f"{type(self).__name__} serves only 'policy' variables (asked for {unknown})")
        if self._export is None:
            raise RuntimeError(f"{type(self).__name__} never called _serve()")
        version = self.num_steps
        arrays = self._export.get(version)
        return version, {name: arrays for name in names}
