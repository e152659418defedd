"""The control loop of a ``run_on_ray`` run, its result handlers and health checks.

``ControlLoop`` is the part of a run that keeps one ``train`` call
on the learner (and, through ``driver_actors``, one ``run_steps`` call per
actor) in flight, handles each result as it arrives, does the periodic work
(status line, learner/replay metrics) and notices stalls and a dead replay
server. When to evaluate, checkpoint, report and stop is the shared
``rlplat.controller.Controller``'s decision: the driver is its ``Program``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import ray

from rlplat import run_dir
from rlplat.controller import Controller
from rlplat.distributed import counters
from rlplat.distributed import driver_records
from rlplat.distributed import errors
from rlplat.distributed import progress
from rlplat.distributed import status_board
from rlplat.distributed.startup_times import StartupTimes
from rlplat.distributed.driver_actors import ActorCare
from rlplat.distributed.driver_replay import ReplayWatch
from rlplat.distributed.errors import RunFailedError
from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.distributed.ray_calls import RayCalls
from rlplat.distributed.worker_set import WorkerSet
from rlplat.experiment import Experiment

# Periodic checkpoints that fail this many times in a row stop the run (a full disk at once).
MAX_CHECKPOINT_FAILURES = 3


class ControlLoop(ActorCare, ReplayWatch):
    """The running part of a run: calls in flight, their results, and the health checks.

    It is the ``controller.Program`` the shared ``Controller`` drives; its
    actor methods are ``driver_actors.ActorCare``'s, its replay checks
    ``driver_replay.ReplayWatch``'s. Every attribute is born
    here; the counts are ``counts``', the handles ``workers``'.

    Args:
      experiment, layout: the run and its layout.
      workers: the started ``WorkerSet``.
      counts: the run's ``RunCounters``.
      loggers: role -> logger (the driver opens them at start-up).
      console: the status line.
      calls: the driver's signal-aware waits.
      stop_event: set from any thread to stop as at the budget.
    """

    def __init__(self, experiment: Experiment, layout: RayLayoutConfig, workers: WorkerSet,
                 counts: counters.RunCounters, loggers: Dict[str, Any], console: progress.ConsoleLine,
                 calls: RayCalls, stop_event: Optional[threading.Event] = None):
        self.experiment, self.layout = experiment, layout
        self.workers, self.counts, self.loggers = workers, counts, loggers
        self.console, self.calls, self.stop_event = console, calls, stop_event
        self.logdir = experiment.logdir
        self.max_actor_steps = experiment.budget
        self.checkpoint_failures = 0  # periodic checkpoints failed in a row
        self.controller = Controller(experiment.schedule(layout.console_every_s))
        self.handlers: Dict[str, Callable[..., None]] = {
            "train": self._on_train, "eval": self._on_eval, "checkpoint": self._on_checkpoint,
            "actor": self._on_actor, "placement": self._on_placement}
        self.pending: Dict[Any, tuple] = {}  # ref -> (handler name, its extra arguments)
        self.train_ref: Any = None
        self.train_submitted = 0.0
        self.eval_ref: Any = None
        self.ckpt_ref: Any = None
        self.stopping = False          # a stop reason came up, learner asked to stop
        self.stop_deadline = math.inf
        self.learner_stopped = False
        self.stop_reason: Optional[str] = None  # max_actor_steps, target_eval_return, stop_event
        self.env_rate, self.learn_rate = progress.RateMeter(), progress.RateMeter()
        self.learner_steps_time = time.monotonic()  # when counts.learner_steps was last reported
        self.steady_start: Optional[tuple] = None  # (time, actor steps, learner steps) of the first result
        self.steady_end: Optional[tuple] = None    # ... and of the last one
        self.loop_started: Optional[float] = None
        self.loop_ended: Optional[float] = None
        self.last_learner_metrics: Dict[str, Any] = {}
        self.startup = StartupTimes()
        self.learner_startup_s: Dict[str, float] = {}  # the learner's own start-up steps (record_learner_startup)
        self.learner_startup_cpu_s: Dict[str, float] = {}  # the CPU seconds behind them
        self.replay_stats: Dict[str, Any] = {}
        self.replay_shard_stats: List[Dict[str, Any]] = []  # per shard, with --num-replay-shards > 1
        self.replay_probe_misses = 0  # the replay server did not answer, its process was alive
        self.next_status_publish = 0.0  # monotonic time of the next status_board snapshot
        self.status_publish_failed = False

    def begin(self) -> None:
        """Gives the learner its first train call and the actors their first chunks (``run`` goes on)."""
        now = time.monotonic()
        self.loop_started = now
        self.env_rate.update(self.counts.actor_steps, now)
        self.learn_rate.update(self.counts.learner_steps, now)
        self._submit_train()
        self._tend_actors()

    def run(self) -> None:
        """Runs the control loop under the experiment's schedule until the learner has stopped."""
        if self.loop_started is None:
            self.begin()
        stop_event = self.stop_event
        self.controller.run(self, None if stop_event is None else stop_event.is_set)
        self.stop_reason = self.controller.stop_reason
        self.loop_ended = time.monotonic()

    def finish(self, timeout_s: float, final_eval: bool, save_by: Optional[float], min_save_s: float) -> None:
        """Stops the learner at a step boundary, saves the final checkpoint, evaluates.

        ``timeout_s`` bounds reaching the step boundary; ``save_by`` (a
        ``time.monotonic()`` deadline, yet at least ``min_save_s``) the
        checkpoint; without it, what is left of ``timeout_s`` plus a call.
        """
        workers, layout = self.workers, self.layout
        if workers.learner is None:
            return
        deadline = time.monotonic() + timeout_s
        workers.learner.request_stop.remote()
        # Keep actors inserting until the learner's train call has returned.
        while self.train_ref is not None and time.monotonic() < deadline:
            self.calls.check_signal()
            self.stopping = True
            self.stop_deadline = deadline + 1.0
            self._wait_and_handle(0.5)
            self._tend_actors()
        self.learner_stopped = True
        if self.train_ref is not None:
            raise RunFailedError(f"learner did not reach a step boundary within {timeout_s:g}s")
        workers.stop_actors()
        self.calls.check_signal()  # a signal (or a second one) that came meanwhile skips the save
        if save_by is None:
            save_timeout_s = max(1.0, deadline - time.monotonic()) + layout.call_timeout_s
        else:
            save_timeout_s = max(min_save_s, save_by - time.monotonic())
        saved = self.calls.get(workers.learner.save_checkpoint.remote(min(layout.call_timeout_s, save_timeout_s)),
                               save_timeout_s, "final checkpoint")
        self._record_checkpoint(saved)
        if final_eval:
            self._launch_evaluator()
            result = self.calls.get(workers.evaluator.evaluate.remote(self.experiment.eval_episodes,
                                                                      self.experiment.video_every_evals > 0),
                                    layout.call_timeout_s * 5, "final evaluation")
            self._log_eval(result, self.counts.actor_steps)
        for ref, (kind, *args) in list(self.pending.items()):  # a placement answer not yet handled
            if kind == "placement":
                del self.pending[ref]
                self._on_placement(ref, *args)

    # ------------------------------------------------- controller.Program
    def steps(self) -> int:
        return self.counts.actor_steps

    def eval_return(self) -> Optional[float]:
        return self.counts.eval.get("eval_return")

    def advance(self, max_steps: Optional[int]) -> bool:
        """Half a second of handling results, replacing actors and checking for stalls."""
        del max_steps  # actors run their chunks on their own; the budget is counted here
        self.calls.check_signal()  # SIGINT/SIGTERM: leave for Driver.run's final checkpoint
        if self.learner_stopped:
            return True
        self._wait_and_handle(0.5)
        self._tend_actors()
        self._check_stalls(time.monotonic())
        return self.learner_stopped

    def request_stop(self, reason: str) -> None:
        if reason == "stop_event":
            self.console.message("stop requested: stopping as at --max-actor-steps (final "
                                 "checkpoint and evaluation)")
        self.stop_reason = reason
        self.stopping = True
        self.stop_deadline = time.monotonic() + self.layout.stop_timeout_s
        self.workers.learner.request_stop.remote()

    def evaluate(self, video: bool) -> bool:
        if self.eval_ref is not None:
            return False
        self._launch_evaluator()
        self.eval_ref = self.workers.evaluator.evaluate.remote(self.experiment.eval_episodes, video)
        # The evaluator pulls its weights as it starts, so the result
        # belongs to the step counts of now, not of when it returns.
        self.pending[self.eval_ref] = ("eval", self.counts.actor_steps)
        return True

    def checkpoint(self) -> bool:
        if self.ckpt_ref is not None:
            return False
        self.ckpt_ref = self.workers.learner.save_checkpoint.remote(self.layout.call_timeout_s)
        self.pending[self.ckpt_ref] = ("checkpoint",)
        return True

    def report(self) -> None:
        self._periodic()

    def _wait_and_handle(self, timeout_s: float) -> None:
        refs = list(self.pending)
        if not refs:
            time.sleep(timeout_s)
            return
        ready, rest = ray.wait(refs, num_returns=1, timeout=timeout_s)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        for ref in ready:
            kind, *args = self.pending.pop(ref)
            self.handlers[kind](ref, *args)

    def _submit_train(self) -> None:
        self.train_ref = self.workers.learner.train.remote(self.layout.learner_chunk_steps)
        self.train_submitted = time.monotonic()
        self.pending[self.train_ref] = ("train",)

    def startup_milestone(self, milestone: str, wall_time: Optional[float] = None) -> None:
        """Marks a start-up milestone; once all are known, one console line and ``run_info.json``."""
        self.startup.mark(milestone, wall_time)
        if self.startup.complete() and not self.startup.reported:
            self.startup.reported = True
            self.console.message(self.startup.line())
            run_dir.update_run_info(self.logdir, {"startup_s": dict(self.startup.seconds)})

    # ------------------------------------------------------------ result handlers
    def record_learner_startup(self, wall_times: Dict[str, float], cpu_s: Dict[str, float]) -> None:
        """Adds learner start-up steps (wall clock; kept as s from launch) and their CPU-s; records both."""
        self.learner_startup_s.update({step: round(when - self.startup.launched, 3)
                                       for step, when in wall_times.items()})
        self.learner_startup_cpu_s.update({step: round(cpu, 3) for step, cpu in cpu_s.items()})
        run_dir.update_run_info(self.logdir, {"learner_startup_s": dict(self.learner_startup_s),
                                              "learner_startup_cpu_s": dict(self.learner_startup_cpu_s)})

    def _on_train(self, ref) -> None:
        self.train_ref = None
        try:
            metrics = self.calls.get(ref, self.layout.call_timeout_s, "learner")
        except RunFailedError as e:
            if not self.workers.colocate:
                self._check_replay_alive()  # a dead replay server explains a failed learner
            raise RunFailedError(f"learner failed: {errors.one_line(e.__cause__ or e)}; the run cannot "
                                 "continue (fix the cause, then continue with --resume)") from None
        self.counts.learner_steps = int(metrics.get("learner_steps", self.counts.learner_steps))
        self.learner_steps_time = time.monotonic()
        if "first_step_traced_time" in metrics:  # the learner's path, as its ready() steps
            traced = metrics.pop("first_step_traced_time")
            cpu = metrics.pop("first_step_trace_cpu_s", None)
            self.record_learner_startup({"first_step_traced": traced},
                                        {} if cpu is None else {"first_step_trace": cpu})
        if "first_step_time" in metrics:
            self.startup_milestone("first_learner_step", metrics.pop("first_step_time"))
        self._launch_evaluator()  # after the learner's first step: its start stays off the learner's
        if "replay_inserts_before_first_step" in metrics:  # whether a resumed learner had to refill
            self.loggers["driver"].write(self.counts.actor_steps, {
                "event": "learner_first_step", "learner_steps": self.counts.learner_steps,
                "replay_inserts_before_first_step": int(metrics["replay_inserts_before_first_step"])})
        self.learn_rate.update(self.counts.learner_steps)
        # A call that took no step (a stop requested meanwhile) has counts but no
        # losses: the last step's losses stay the ones logged.
        self.last_learner_metrics = ({**self.last_learner_metrics, **metrics} if not metrics.get("steps", 1)
                                     else metrics)
        if self.stopping:
            self.learner_stopped = True
        else:
            self._submit_train()

    def _launch_evaluator(self) -> None:
        ref = self.workers.launch_evaluator()
        if ref is not None:
            self.pending[ref] = ("placement", "evaluator")

    def _on_placement(self, ref, name: str) -> None:
        self.workers.record_placement(name, ref)

    def _on_eval(self, ref, actor_steps: int) -> None:
        self.eval_ref = None
        try:
            result = self.calls.get(ref, self.layout.call_timeout_s, "evaluator")
        except RunFailedError as e:
            self.console.message(f"evaluation failed ({errors.one_line(e.__cause__ or e)}); will retry")
            return
        self._log_eval(result, actor_steps)

    def _log_eval(self, result: Dict[str, Any], actor_steps: int) -> None:
        """Logs an evaluation at the actor steps when it took its weights.

        ``learner_steps`` is the version of the weights it ran (the learner's
        step count when the evaluator pulled them), not the count when it ended.
        """
        video = result.pop("video", None)
        self.counts.record_eval(result, actor_steps)
        version = result.get("policy_version")
        learner_steps = int(version) if version is not None and version >= 0 else self.counts.learner_steps
        self.loggers["evaluator"].write(actor_steps, driver_records.finite({
            **result, "learner_steps": learner_steps}))
        if video:
            self._save_eval_video(video, actor_steps)

    def _save_eval_video(self, video: Dict[str, Any], actor_steps: int) -> None:
        """``<logdir>/videos/eval-<actor steps>.mp4``, the GIF in TensorBoard, a driver event."""
        folder = run_dir.videos_dir(self.logdir)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"eval-{actor_steps}.mp4")
        with open(path, "wb") as f:
            f.write(video["mp4"])
        self.loggers["evaluator"].write_gif("eval_video", video["gif"], actor_steps)
        self.loggers["driver"].write(actor_steps, {"event": "eval_video", "path": path,
                                                   "frames": int(video["frames"])})

    def _on_checkpoint(self, ref) -> None:
        self.ckpt_ref = None
        try:
            saved = self.calls.get(ref, self.layout.call_timeout_s, "checkpoint")
        except RunFailedError as e:
            reason = errors.one_line(e.__cause__ or e)
            self.checkpoint_failures += 1
            last = self.counts.checkpoint_path or "none yet"
            if self.checkpoint_failures >= MAX_CHECKPOINT_FAILURES or "No space left" in reason:
                # Training on without checkpoints would lose everything past the last one.
                raise RunFailedError(f"checkpoint failed {self.checkpoint_failures} time(s) in a row "
                                     f"({reason}); stopping with the last good checkpoint ({last}): "
                                     "free disk space, then --resume") from None
            self.console.message(f"checkpoint failed ({reason}); will retry "
                                 f"({self.checkpoint_failures} of {MAX_CHECKPOINT_FAILURES} in a row)")
            return
        self.checkpoint_failures = 0
        self._record_checkpoint(saved)

    def _record_checkpoint(self, saved: Dict[str, Any]) -> None:
        if "replay_error" in saved:
            self.console.message(f"replay checkpoint failed ({saved['replay_error']}); the learner "
                                 "checkpoint is kept, and a resume uses an older replay checkpoint")
        self.counts.record_checkpoint(self.logdir, saved)

    # ------------------------------------------------------------ periodic work
    def _periodic(self) -> None:
        if not self._read_replay():
            self._check_replay_alive()
        versions = [s.policy_version for s in self.workers.slots if s.policy_version >= 0 and s.active]
        lags = [s.policy_lag for s in self.workers.slots if s.policy_lag is not None and s.active]
        lag = sum(lags) / len(lags) if lags else None
        metrics = dict(self.last_learner_metrics)
        metrics.update({"learner_steps_per_second": self.learn_rate.rate(),
                        "env_steps_per_second": self.env_rate.rate(),
                        "actor_steps": self.counts.actor_steps, "policy_lag": lag,
                        "actor_restarts": self.counts.restarts, "replay_probe_misses": self.replay_probe_misses,
                        **{k: v for k, v in self.replay_stats.items()}})
        self.loggers["learner"].write(self.counts.learner_steps, driver_records.finite(metrics))
        self.console.show(progress.format_status(
            actor_steps=self.counts.actor_steps, max_actor_steps=self.max_actor_steps,
            learner_steps=self.counts.learner_steps, env_steps_per_s=self.env_rate.rate(),
            learner_steps_per_s=self.learn_rate.rate(), eval_return=self.counts.eval.get("eval_return"),
            eval_version=self.counts.eval.get("policy_version"), replay_size=self.replay_stats.get("replay_size"),
            samples_per_insert=self.replay_stats.get("samples_per_insert"),
            policy_version=min(versions) if versions else None, policy_lag=lag, restarts=self.counts.restarts))
        if time.monotonic() >= self.next_status_publish:
            self.next_status_publish = time.monotonic() + status_board.PUBLISH_PERIOD_S
            self.publish_status()

    def publish_status(self, final: bool = False) -> None:
        """The ``rlplat status`` snapshot of this run into the cluster (``status_board``).

        Best effort: a run never fails for its status; the first failure is
        reported once and publishing stops.
        """
        from rlplat.utils import run_status  # pylint: disable=g-import-not-at-top

        if self.status_publish_failed:
            return
        try:
            status = run_status.read_status(self.logdir)
            if final:  # this driver is still alive, but the run is over
                status["run"]["state"] = "ended"
                status["eta_s"] = None
            status["stop_reason"] = self.stop_reason
            status_board.publish(status)
        except Exception as e:  # pylint: disable=broad-except
            self.status_publish_failed = True
            self.console.message(f"run status not published to the cluster ({errors.one_line(e)}); "
                                 "`rlplat status --logdir` still works")

    def _check_stalls(self, now: float) -> None:
        if self.train_ref is not None and now - self.train_submitted > self.layout.learner_stall_timeout_s:
            self._check_replay_alive()
            raise RunFailedError(
                f"learner made no progress for {self.layout.learner_stall_timeout_s:g}s (a train call of "
                f"{self.layout.learner_chunk_steps} steps never returned); the run cannot continue")
        if self.stopping and now > self.stop_deadline:
            raise RunFailedError(
                f"learner did not stop within {self.layout.stop_timeout_s:g}s of being asked; "
                "giving up without a final checkpoint")
        for slot in self.workers.slots:
            if slot.ref is not None and now - slot.submitted > self.layout.actor_stall_timeout_s:
                self.pending.pop(slot.ref, None)
                slot.ref = None
                self._actor_failed(slot, f"a chunk of {slot.chunk} steps ran over "
                                         f"{self.layout.actor_stall_timeout_s:g}s")
