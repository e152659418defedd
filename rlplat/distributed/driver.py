"""The driver loop behind ``run_on_ray``: starts workers, keeps them busy, logs, stops.

See ``layout.py`` for the start order, stopping, counters, failure handling
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

import math
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
from rlplat.distributed.layout import RayLayoutConfig

# After SIGINT/SIGTERM the learner gets this long to reach a step boundary for
# a last checkpoint; process managers usually escalate to SIGKILL after ~30 s.
_SIGNAL_STOP_TIMEOUT_S = 10.0


class Driver(WorkerStartup, ControlLoop, ActorCare):
    """State and control loop of one ``run_on_ray`` call."""

    def __init__(self, builder, env, env_kwargs, num_actors, num_replicas, max_actor_steps, logdir,
                 seed, restored_step, address, console, layout: RayLayoutConfig,
                 stop_event: Optional[threading.Event] = None):
        self.builder, self.env, self.env_kwargs = builder, env, env_kwargs
        self.num_actors, self.num_replicas = num_actors, num_replicas
        self.max_actor_steps = math.inf if max_actor_steps is None else max_actor_steps
        self.logdir, self.seed = logdir, seed
        self.restored_step, self.address, self.cfg = restored_step, address, layout
        self.console = progress.ConsoleLine(console)
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
        self.learner_steps = restored_step or 0
        self.eval: Dict[str, Any] = {}
        self.replay_stats: Dict[str, Any] = {}
        self.checkpoint_path: Optional[str] = None
        self.stop_event = stop_event
        self.stop_reason: Optional[str] = None  # max_actor_steps, target_eval_return, stop_event
        self._signum: Optional[int] = None
        self._hurry = False  # a second signal: stop waiting for anything
        self._tearing_down = False
        self.phases: Dict[str, float] = {}
        self._saved_handlers: Dict[int, Any] = {}

    # ------------------------------------------------------------- entry point
    def run(self) -> Dict[str, Any]:
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
            self.console.message(f"{signal.Signals(self._signum).name}: stopping; saving a checkpoint "
                                 "if the learner allows, then shutting down")
            try:
                self._finish(_SIGNAL_STOP_TIMEOUT_S, final_eval=False)
            except Exception as e:  # pylint: disable=broad-except
                self.console.message(f"no final checkpoint ({errors.one_line(e)})")
            raise
        finally:
            mark = time.monotonic()
            self._teardown()
            self.phases["teardown_s"] = time.monotonic() - mark
        return driver_records.summarize(self, time.monotonic() - started)

    # -------------------------------------------------------------- signals
    def _install_signal_handlers(self) -> None:
        """Routes SIGINT/SIGTERM to ``_on_signal``; called again after ``ray.init``.

        ``ray.init`` replaces the SIGTERM handler (with ``sys.exit``) and Ray's
        C++ core adds a crash handler that turns SIGTERM into an immediate
        exit, skipping all clean-up; installing ours after it puts Python's
        handler back in front.
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
        """First signal: stop gracefully. Second: give up the checkpoint. Then: ignored.

        Raising from the handler interrupts whatever wait the main thread is
        in (``ray.wait``/``ray.get`` poll for signals). Once tearing down, a
        signal must not cut ``ray.kill``/``ray.shutdown`` short, or Ray
        processes would be left behind.
        """
        del frame
        if self._tearing_down:
            return
        if self._signum is None:
            self._signum = signum
            raise RunInterrupted(signum)
        if not self._hurry:
            self._hurry = True
            raise RunInterrupted(signum)

    # ------------------------------------------------------------ stop/teardown
    def _finish(self, timeout_s: float, final_eval: bool) -> None:
        """Stops the learner at a step boundary, saves the final checkpoint, evaluates."""
        if self.learner is None:
            return
        deadline = time.monotonic() + timeout_s
        self.learner.request_stop.remote()
        # Keep actors inserting until the learner's train call has returned.
        while (getattr(self, "train_ref", None) is not None and time.monotonic() < deadline
               and not self._hurry):
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
        saved = self._get(self.learner.save_checkpoint.remote(self.cfg.call_timeout_s),
                          max(1.0, deadline - time.monotonic()) + self.cfg.call_timeout_s,
                          "final checkpoint")
        self._record_checkpoint(saved)
        if final_eval:
            result = self._get(self.evaluator.evaluate.remote(self.cfg.eval_episodes),
                               self.cfg.call_timeout_s * 5, "final evaluation")
            self._log_eval(result, self.actor_steps)

    def _teardown(self) -> None:
        self._tearing_down = True
        if ray.is_initialized():
            for handle in [s.handle for s in self.slots] + [self.evaluator, self.learner, self.replay]:
                kill_worker(handle)
        for logger in self.loggers.values():
            logger.close()
        self.console.close()
        if self.connection is not None:
            cluster.disconnect(self.connection)
        elif not self._ray_was_up and ray.is_initialized():
            ray.shutdown()  # interrupted inside connect(): Ray is up but we never got its handle
        self._restore_signal_handlers()

    # --------------------------------------------------------------- helpers
    def _get(self, ref, timeout_s: float, what: str):
        """``ray.get`` with a timeout; any failure becomes a one-line RunFailedError."""
        try:
            return ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise RunFailedError(f"{what} did not answer within {timeout_s:g}s") from e
        except ray.exceptions.RayError as e:
            raise RunFailedError(f"{what} failed: {errors.one_line(e)}") from e
