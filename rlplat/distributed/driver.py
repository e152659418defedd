"""The driver loop behind ``run_on_ray``: starts workers, keeps them busy, logs, stops.

See ``rlplat.runners.on_ray`` for the start order, stopping, counters, failure handling
and where logs go; this module and four beside it are the machinery:

- ``driver`` (here): ``Driver``, its state, ``run()``, signals, the final
  checkpoint/evaluation and teardown;
- ``driver_startup``: starting replay, learner (or learner group), actors and
  evaluator, the placement report, loggers and ``run_info.json``;
- ``driver_loop``: the control loop, result handlers, periodic logging and
  checkpoints, stall and replay-liveness checks;
- ``driver_actors``: actor chunks, and failed actors replaced, counted, logged;
- ``driver_records``: the run's summary and the shaping of logged records.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Dict, List, Optional

import ray

from rlplat.distributed import cluster
from rlplat.distributed import driver_records
from rlplat.distributed import errors
from rlplat.distributed import progress
from rlplat.distributed.actor_slots import ActorSlot
from rlplat.distributed.driver_actors import ActorCare
from rlplat.distributed.driver_loop import ControlLoop
from rlplat.distributed.driver_startup import WorkerStartup, kill_worker
from rlplat.distributed.errors import RunFailedError, RunInterrupted
from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.controller import Controller
from rlplat.experiment import Experiment, RunResult

# After SIGINT/SIGTERM the learner gets up to _SIGNAL_STOP_TIMEOUT_S to reach
# a step boundary and the checkpoint what is left of _SIGNAL_BUDGET_S (at
# least _SIGNAL_MIN_SAVE_S): with teardown (3-9 s measured on 2 busy cores)
# that stays under the ~30 s after which process managers send SIGKILL.
_SIGNAL_STOP_TIMEOUT_S = 15.0
_SIGNAL_BUDGET_S = 20.0
_SIGNAL_MIN_SAVE_S = 5.0
# Longest slice of any wait of the driver's: a signal is acted on within it.
_POLL_S = 0.5


class Driver(WorkerStartup, ControlLoop, ActorCare):
    """State and control loop of one ``run_on_ray`` call."""

    def __init__(self, experiment: Experiment, layout: RayLayoutConfig, restored_step: Optional[int],
                 stop_event: Optional[threading.Event] = None):
        self.experiment = experiment
        self.builder = experiment.builder
        self.env, self.env_kwargs = experiment.environment.name, dict(experiment.environment.kwargs)
        self.num_actors, self.num_replicas = experiment.num_actors, layout.num_learner_replicas
        self.max_actor_steps = experiment.budget
        self.logdir, self.seed = experiment.logdir, experiment.seed
        self.restored_step, self.address, self.cfg = restored_step, layout.address, layout
        self.console = progress.ConsoleLine(layout.console)
        self.controller = Controller(experiment.schedule(layout.console_every_s))
        self.connection: Optional[cluster.Connection] = None
        self.replay = None
        self.learner = None
        self.evaluator = None
        self.slots: List[ActorSlot] = []
        self.loggers: Dict[str, Any] = {}
        self.replay_address: Optional[str] = None
        # Counters (see module docstring).
        self.actor_steps = 0
        self.episodes = 0
        self.restarts = 0
        self.physics_errors = 0  # simulations that diverged (episode ended, counted)
        self.env_errors = 0      # other exceptions from an environment (episode ended, counted)
        self.learner_steps = restored_step or 0
        self.eval: Dict[str, Any] = {}
        self.evaluations: List[tuple] = []  # (actor steps, mean return) of every evaluation
        self.evals_started = 0  # every video_every_evals-th one is recorded on video
        self.next_status_publish = 0.0  # monotonic time of the next status_board snapshot
        self.status_publish_failed = False
        self.replay_stats: Dict[str, Any] = {}
        self.replay_probe_misses = 0  # the replay server did not answer, its process was alive
        self.checkpoint_path: Optional[str] = None
        self.stop_event = stop_event
        self.stop_reason: Optional[str] = None  # max_actor_steps, target_eval_return, stop_event
        self._signum: Optional[int] = None  # the first SIGINT/SIGTERM (see _on_signal)
        self._hurry = False  # a second signal: stop waiting for anything
        self._signal_handled = False  # stopping on _signum: only a second signal interrupts
        self.phases: Dict[str, float] = {}
        self._saved_handlers: Dict[int, Any] = {}

    # ------------------------------------------------------------- entry point
    def run(self) -> RunResult:
        """Starts the workers, runs the control loop, stops, tears down; returns the summary.

        Raises RunInterrupted after SIGINT/SIGTERM (see ``_on_signal``) once
        the final checkpoint is saved (or skipped) and every worker is gone.
        """
        started = time.monotonic()
        self._install_signal_handlers()
        self._ray_was_up = ray.is_initialized()
        try:
            self._start()
            self.phases["startup_s"] = time.monotonic() - started
            if self.actor_steps >= self.max_actor_steps:
                self.stop_reason = "max_actor_steps"
                self.console.message(f"run already has {self.actor_steps:,} actor steps "
                                     f"(--max-actor-steps {self.max_actor_steps:,}); nothing to do")
            else:
                self._loop()
            mark = time.monotonic()
            self._finish(self.cfg.stop_timeout_s, final_eval=True)
            self.phases["finish_s"] = time.monotonic() - mark
        except RunInterrupted:
            self._stop_on_signal()
            raise
        finally:
            mark = time.monotonic()
            self._teardown()
            self.phases["teardown_s"] = time.monotonic() - mark
        return driver_records.summarize(self, time.monotonic() - started)

    def _stop_on_signal(self) -> None:
        """The final checkpoint after a signal, unless a second one came or nothing ran yet."""
        self._signal_handled = True
        name = signal.Signals(self._signum).name
        if self._hurry:
            self.console.message("second signal: stopping now, without a final checkpoint")
            return
        if getattr(self, "loop_started", None) is None:
            # The learner has not trained since it was built or restored: a
            # checkpoint would hold nothing new, and waiting for it to come up
            # could take minutes.
            self.console.message(f"{name} during start-up: stopping (nothing trained yet, "
                                 "so no checkpoint)")
            return
        self.console.message(f"{name}: stopping; saving a checkpoint (a second signal skips it), "
                             "then shutting down")
        started = time.monotonic()
        try:
            self._finish(_SIGNAL_STOP_TIMEOUT_S, final_eval=False,
                         save_by=started + _SIGNAL_BUDGET_S)
        except RunInterrupted:
            self.console.message("second signal: stopping now, without a final checkpoint")
            return
        except Exception as e:  # pylint: disable=broad-except
            self.console.message(f"no final checkpoint ({errors.one_line(e)})")
            return
        self.console.message(f"final checkpoint {self.checkpoint_path} "
                             f"({time.monotonic() - started:.1f}s after the signal was acted on)")

    # -------------------------------------------------------------- signals
    def _install_signal_handlers(self) -> None:
        """Routes SIGINT/SIGTERM to ``_on_signal``; called again after ``ray.init``.

        ``ray.init`` is kept from replacing them (``cluster.keep_signal_handlers``),
        but Ray's C++ core hooks SIGTERM below Python (a stack dump on stderr,
        then Python's handler); installing ours again puts Python's in front.
        """
        if threading.current_thread() is not threading.main_thread():
            return  # Only the main thread may own signals (e.g. a test runs us in a thread).
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._saved_handlers.setdefault(signum, signal.getsignal(signum))
            signal.signal(signum, self._on_signal)

    def _restore_signal_handlers(self) -> None:
        for signum, handler in self._saved_handlers.items():
            signal.signal(signum, handler)
        self._saved_handlers.clear()

    def _on_signal(self, signum, frame) -> None:
        """Records the signal: the first asks for a graceful stop, the second for a quick one.

        It never raises. Ray runs Python's signal handlers from inside
        ``ray.wait``/``ray.get`` (where the driver spends its time) and turns
        any KeyboardInterrupt raised there, RunInterrupted included, into a
        bare KeyboardInterrupt: the signal and the final checkpoint were lost.
        Raising anywhere else could cut a log line or counters.json in half.
        So the main thread acts on it at its next ``_check_signal``, which
        every wait reaches within ``_POLL_S``.
        """
        del frame
        if self._signum is None:
            self._signum = signum
        else:
            self._hurry = True

    def _check_signal(self) -> None:
        """Raises RunInterrupted if a signal asks to stop (and is not being acted on already)."""
        if self._hurry or (self._signum is not None and not self._signal_handled):
            raise RunInterrupted(self._signum)

    # ------------------------------------------------------------ stop/teardown
    def _finish(self, timeout_s: float, final_eval: bool, save_by: Optional[float] = None) -> None:
        """Stops the learner at a step boundary, saves the final checkpoint, evaluates.

        ``timeout_s`` bounds reaching the step boundary; ``save_by`` (a
        ``time.monotonic()`` deadline, yet at least ``_SIGNAL_MIN_SAVE_S``)
        the checkpoint; without it, what is left of ``timeout_s`` plus a call.
        """
        if self.learner is None:
            return
        deadline = time.monotonic() + timeout_s
        self.learner.request_stop.remote()
        # Keep actors inserting until the learner's train call has returned.
        while getattr(self, "train_ref", None) is not None and time.monotonic() < deadline:
            self._check_signal()
            self.stopping = True
            self.stop_deadline = deadline + 1.0
            self._wait_and_handle(0.5)
            self._tend_actors()
        self.learner_stopped = True
        if getattr(self, "train_ref", None) is not None:
            raise RunFailedError(f"learner did not reach a step boundary within {timeout_s:g}s")
        for slot in self.slots:  # No more data is needed: stop acting now.
            kill_worker(slot.handle)
            slot.stopped = True
        self._check_signal()  # a signal (or a second one) that came meanwhile skips the save
        if save_by is None:
            save_timeout_s = max(1.0, deadline - time.monotonic()) + self.cfg.call_timeout_s
        else:
            save_timeout_s = max(_SIGNAL_MIN_SAVE_S, save_by - time.monotonic())
        saved = self._get(self.learner.save_checkpoint.remote(min(self.cfg.call_timeout_s,
                                                                  save_timeout_s)),
                          save_timeout_s, "final checkpoint")
        self._record_checkpoint(saved)
        if final_eval:
            result = self._get(self.evaluator.evaluate.remote(self.experiment.eval_episodes,
                                                              self.experiment.video_every_evals > 0),
                               self.cfg.call_timeout_s * 5, "final evaluation")
            self._log_eval(result, self.actor_steps)

    def _teardown(self) -> None:
        # Signals now only set flags nobody checks: nothing here is cut short,
        # so no Ray process is left behind.
        if ray.is_initialized():
            if self.learner is not None and getattr(self, "learner_stopped", False):
                # Ray ends workers without running their exit hooks: remove the
                # learner's shared-memory weights first (a killed learner's are
                # removed by the next learner on this host).
                try:
                    ray.get(self.learner.release_shared_weights.remote(), timeout=2.0)
                except Exception:  # pylint: disable=broad-except  (a learner group has none)
                    pass
            for handle in [s.handle for s in self.slots] + [self.evaluator, self.learner, self.replay]:
                kill_worker(handle)
        for logger in self.loggers.values():
            logger.close()
        self.console.close()
        if self.loggers and ray.is_initialized():
            self._publish_status(final=True)
        if self.connection is not None:
            cluster.disconnect(self.connection)
        elif not self._ray_was_up and ray.is_initialized():
            ray.shutdown()  # interrupted inside connect(): Ray is up but we never got its handle
        self._restore_signal_handlers()

    # --------------------------------------------------------------- helpers
    def _wait(self, refs: List[Any], num_returns: int, timeout_s: float):
        """``ray.wait`` in slices of ``_POLL_S``, acting on a signal between them."""
        deadline = time.monotonic() + timeout_s
        ready: List[Any] = []
        rest = list(refs)
        if num_returns < 1 or not rest:
            return ready, rest
        while True:
            got, rest = ray.wait(rest, num_returns=min(num_returns - len(ready), len(rest)),
                                 timeout=max(0.0, min(_POLL_S, deadline - time.monotonic())))
            ready += got
            if len(ready) >= num_returns or not rest or time.monotonic() >= deadline:
                return ready, rest
            self._check_signal()

    def _get(self, ref, timeout_s: float, what: str):
        """``ray.get`` with a timeout; any failure becomes a one-line RunFailedError.

        Waits in slices (``_wait``), so a signal interrupts a long wait such as
        the learner's start-up.
        """
        ready, _ = self._wait([ref], 1, timeout_s)
        if not ready:
            raise RunFailedError(f"{what} did not answer within {timeout_s:g}s")
        try:
            # Ready, and ray.wait made it local: this returns at once.
            return ray.get(ref, timeout=self.cfg.call_timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise RunFailedError(f"{what} did not answer within {timeout_s:g}s") from e
        except ray.exceptions.RayError as e:
            raise RunFailedError(f"{what} failed: {errors.one_line(e)}") from e
