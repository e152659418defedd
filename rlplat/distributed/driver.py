"""The driver behind ``run_on_ray``: starts workers, keeps them busy, logs, stops.

See ``rlplat.runners.on_ray`` for the start order, stopping, counters, failure
handling and where logs go. The driver is composed of parts that own their state:

- ``ray_calls.RayCalls``: the signals, and Ray waits that act on them within 0.5 s;
- ``counters.RunCounters``: actor steps, episodes, restarts, evaluations, checkpoints;
- ``worker_set.WorkerSet``: the workers' handles, their placement, start and end;
- ``driver_loop.ControlLoop`` (with ``driver_actors.ActorCare``): the calls in
  flight and their results, as the shared ``rlplat.controller.Controller``'s program;
- ``driver`` (here): ``Driver``, which composes them: ``run()``, start-up order,
  the stop after a signal, loggers, ``run_info.json`` and teardown;
- ``driver_records``: the run's result and the shaping of logged records.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import time
from typing import Any, Dict, Optional

import ray

from rlplat import precision
from rlplat import run_dir
from rlplat.distributed import cluster
from rlplat.distributed import counters
from rlplat.distributed import driver_records
from rlplat.distributed import errors
from rlplat.distributed import progress
from rlplat import seeding
from rlplat.distributed.driver_loop import ControlLoop
from rlplat.distributed.errors import RunFailedError, RunInterrupted
from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.distributed.ray_calls import RayCalls
from rlplat.distributed.worker_set import WorkerSet
from rlplat.experiment import Experiment, RunResult

# After SIGINT/SIGTERM the learner gets up to _SIGNAL_STOP_TIMEOUT_S to reach
# a step boundary and the checkpoint what is left of _SIGNAL_BUDGET_S (at
# least _SIGNAL_MIN_SAVE_S): with teardown that stays under the ~30 s after
# which process managers send SIGKILL (README: RAY_JOB_STOP_WAIT_TIME_S).
_SIGNAL_STOP_TIMEOUT_S = 15.0
_SIGNAL_BUDGET_S = 20.0
_SIGNAL_MIN_SAVE_S = 5.0


class Driver:
    """One ``run_on_ray`` call: its parts, signals, start-up, ending and teardown.

    The parts own their state, all born in their ``__init__``: ``calls``
    (signal-aware Ray waits and the signals), ``counts`` (``RunCounters``),
    ``workers`` (``WorkerSet``) and ``loop`` (``ControlLoop``, driven by the
    shared ``Controller``). The driver itself holds the loggers and the console.
    """

    def __init__(self, experiment: Experiment, layout: RayLayoutConfig, restored_step: Optional[int],
                 stop_event: Optional[threading.Event] = None):
        self.experiment, self.layout, self.restored_step = experiment, layout, restored_step
        self.logdir = experiment.logdir
        self.console = progress.ConsoleLine(layout.console)
        self.loggers: Dict[str, Any] = {}
        self.calls = RayCalls(layout.call_timeout_s)
        self.counts = counters.RunCounters(learner_steps=restored_step or 0)
        self.workers = WorkerSet(experiment, layout, restored_step, self.calls, self.console)
        self.loop = ControlLoop(experiment, layout, self.workers, self.counts, self.loggers, self.console,
                                self.calls, stop_event=stop_event)
        self.phases: Dict[str, float] = {}
        self.ray_was_up = False

    # ------------------------------------------------------------- entry point
    def run(self) -> RunResult:
        """Starts the workers, runs the control loop, stops, tears down; returns the result.

        Raises RunInterrupted after SIGINT/SIGTERM (see ``RayCalls.on_signal``)
        once the final checkpoint is saved (or skipped) and every worker is gone.
        """
        started = time.monotonic()
        self.calls.install_signal_handlers()
        self.ray_was_up = ray.is_initialized()
        try:
            self._start()
            self.phases["startup_s"] = time.monotonic() - started
            if self.counts.actor_steps >= self.experiment.budget:
                self.workers.launch_evaluator()  # for the final evaluation
                self.workers.report_placement()
                self.loop.stop_reason = "max_actor_steps"
                self.console.message(f"run already has {self.counts.actor_steps:,} actor steps "
                                     f"(--max-actor-steps {self.experiment.max_actor_steps:,}); nothing to do")
            else:
                # The first tasks go out before the placement report waits for every worker's
                # answer (each one's start): the actors fill replay meanwhile.
                self.loop.begin()
                self.workers.report_placement()
                self.loop.run()
            mark = time.monotonic()
            self._finish(self.layout.stop_timeout_s, final_eval=True)
            self.phases["finish_s"] = time.monotonic() - mark
            # The driver needs no TensorFlow (~2.5 CPU-s per run); the record keeps that true.
            run_dir.update_run_info(self.logdir, {"driver_tensorflow": "tensorflow" in sys.modules})
        except RunInterrupted:
            self._stop_on_signal()
            raise
        except OSError as e:  # the driver's own writes: logs, counters, run records (a full disk)
            if isinstance(e, ConnectionError) or e.errno is None:
                raise  # not a file the run writes: a connection, a refusal with its own message
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            raise RunFailedError(f"cannot write the run's files: {e.strerror or e}{where}; stopped with the "
                                 f"last good checkpoint ({self.counts.checkpoint_path or 'none yet'}): free "
                                 "disk space, then --resume") from None
        finally:
            mark = time.monotonic()
            close_error = self._teardown()
            self.phases["teardown_s"] = time.monotonic() - mark
        if close_error is not None:  # the run itself ended well; its last log lines did not fit
            raise RunFailedError(f"cannot write the run's files: {close_error.strerror or close_error}; the run "
                                 f"ended with its checkpoint ({self.counts.checkpoint_path or 'none'}) but its "
                                 "last log lines may be missing: free disk space")
        return driver_records.summarize(self, time.monotonic() - started)

    def _start(self) -> None:
        workers = self.workers
        workers.describe_environment()
        self.calls.check_signal()
        workers.connect(self.calls.install_signal_handlers)
        self.loop.startup_milestone("ray_up")
        # The workers start first: the driver's own set-up below then runs
        # while their processes start, instead of before.
        launch_requested = time.time()
        workers.launch()
        if self.restored_step is not None:
            self.counts.restore(self.logdir, self.restored_step)
            damaged = [s for s in run_dir.damaged_steps(self.logdir) if s > self.restored_step]
            if damaged:
                self.console.message(f"resume: skipped damaged checkpoint(s) "
                                     f"{', '.join(f'ckpt-{s}' for s in damaged)}; restoring "
                                     f"ckpt-{self.restored_step}")
        self._open_loggers()
        self._write_run_info()
        ready = workers.await_ready()
        self.loop.startup_milestone("learner_ready")
        self.loop.startup_milestone("replay_ready", ready.get("replay_ready_time"))
        if ready.get("startup_times"):  # the learner's own steps, for a profile of the start-up
            self.loop.record_learner_startup(dict(ready["startup_times"], launch_requested=launch_requested),
                                             ready.get("startup_cpu_s") or {})
        self.counts.learner_steps = int(ready["learner_steps"])
        self._report_replay_restore(workers.replay_restore)

    def _stop_on_signal(self) -> None:
        """The final checkpoint after a signal, unless a second one came or nothing ran yet."""
        self.calls.handled = True
        name = signal.Signals(self.calls.signum).name
        if self.calls.hurry:
            self.console.message("second signal: stopping now, without a final checkpoint")
            return
        if self.loop.loop_started is None:
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
        self.console.message(f"final checkpoint {self.counts.checkpoint_path} "
                             f"({time.monotonic() - started:.1f}s after the signal was acted on)")

    def _finish(self, timeout_s: float, final_eval: bool, save_by: Optional[float] = None) -> None:
        """The loop's ending: the learner stops, the final checkpoint, the final evaluation."""
        self.loop.finish(timeout_s, final_eval, save_by, _SIGNAL_MIN_SAVE_S)

    def _teardown(self) -> Optional[OSError]:
        """Ends every worker and closes the logs; returns the error of a log that could not be closed.

        A failed close (a full disk) must not stop the rest of the teardown, nor
        hide the error the run is already ending with.
        """
        # Signals now only set flags nobody checks: nothing here is cut short,
        # so no Ray process is left behind.
        if ray.is_initialized():
            self.workers.kill_all(learner_stopped=self.loop.learner_stopped)
        close_error: Optional[OSError] = None
        for logger in self.loggers.values():
            try:
                logger.close()
            except OSError as e:
                close_error = close_error or e
        self.console.close()
        if self.loggers and ray.is_initialized():
            self.loop.publish_status(final=True)
        if self.workers.connection is not None:
            cluster.disconnect(self.workers.connection)
        elif not self.ray_was_up and ray.is_initialized():
            ray.shutdown()  # interrupted inside connect(): Ray is up but we never got its handle
        self.calls.restore_signal_handlers()
        return close_error

    # ------------------------------------------------------------- records
    def _open_loggers(self) -> None:
        from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top

        resumed = self.restored_step is not None
        steps = self.counts.actor_steps
        purge = {"learner": self.restored_step, "actor": steps, "evaluator": steps, "driver": steps}
        for role in ("actor", "learner", "evaluator", "driver"):
            # The driver's records are events (actor failures), not curves: JSONL only.
            self.loggers[role] = loggers.make_logger(
                self.logdir, role, purge_after_step=purge[role] if resumed else None,
                tensorboard=role != "driver")

    def _write_run_info(self) -> None:
        from rlplat import agent_spec  # pylint: disable=g-import-not-at-top
        from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top
        from rlplat.utils import run_info  # pylint: disable=g-import-not-at-top

        exp, workers = self.experiment, self.workers
        config = {**exp.config_record(), "num_learner_replicas": workers.num_replicas,
                  "layout": dataclasses.asdict(self.layout)}
        agent_config = getattr(exp.builder, "config", None)
        # What the learner computes in: the learner resolves "auto" on its host with the same function.
        resolved = precision.for_config(agent_config, gpu=bool(workers.plan and workers.plan.learner_gpus))
        if resolved is not None:
            self.console.message(resolved.line(precision.agent_label(agent_config)))
        run_info.write_run_info(self.logdir, config, extra={
            "precision": None if resolved is None else resolved.to_dict(),
            "layout": "ray", "agent": agent_spec.agent_of_builder(exp.builder),
            "builder": type(exp.builder).__name__,
            "ray_address": workers.connection.address, "ray_local": workers.connection.local,
            "placement": dataclasses.asdict(workers.plan), "colocate_replay": workers.colocate,
            "actor_seeds": [seeding.actor_seed(exp.seed, i) for i in range(exp.num_actors)],
            "resumed_from_step": self.restored_step})
        self.loggers["learner"].write_text("config", loggers.config_markdown(config),
                                           step=self.restored_step or 0)

    def _report_replay_restore(self, restore) -> None:
        """Says what replay started with (``--replay-checkpoint``): console, metrics.jsonl, run_info.

        ``replay_restored_items`` is 0 when nothing was restored: a new run, or
        a resume with no replay checkpoint (then it says so, in one line).
        """
        if restore is None:
            return
        items, path = int(restore["replay_restored_items"]), restore["replay_restored_from"]
        if restore.get("replay_skipped"):
            self.console.message(f"replay: skipped unreadable replay checkpoint(s) "
                                 f"{', '.join(restore['replay_skipped'])}")
        if path is not None:
            step = run_dir.step_of(path.rstrip("/"))
            older = "" if step == self.restored_step else f", older than learner step {self.restored_step:,}"
            self.console.message(f"replay: restored {items:,} items from {path} (step {step:,}{older})")
        elif self.restored_step is not None:
            self.console.message(f"replay: no replay checkpoint for learner step {self.restored_step:,} "
                                 f"in {run_dir.replay_checkpoints_dir(self.logdir)}; starting with an "
                                 "empty replay (learning resumes once it holds the warm-up again)")
        record = {"replay_restored_items": items, "replay_restored_from": path,
                  **{k: int(restore.get(k, 0)) for k in ("replay_restored_inserts",
                                                          "replay_restored_samples")}}
        self.counts.replay_restored_items = items
        self.loggers["driver"].write(self.counts.actor_steps, {"event": "replay_restore", **record})
        run_dir.update_run_info(self.logdir, record)

