"""The control loop of a ``run_on_ray`` run, its result handlers and health checks.

``ControlLoop`` is the part of ``driver.Driver`` that keeps one ``train`` call
on the learner (and, through ``driver_actors``, one ``run_steps`` call per
actor) in flight, handles each result as it arrives, does the periodic work
(status line, learner/replay metrics) and notices stalls and a dead replay
server. When to evaluate, checkpoint, report and stop is the shared
``rlplat.controller.Controller``'s decision: the driver is its ``Program``.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, Optional

import ray

from rlplat.distributed import counters
from rlplat.distributed import driver_records
from rlplat.distributed import errors
from rlplat.distributed import progress
from rlplat.distributed import status_board
from rlplat.distributed.errors import RunFailedError


class ControlLoop:
    """Loop methods of ``driver.Driver``.

    A mixin: the state lives in ``Driver.__init__`` and ``WorkerStartup._start``;
    ``_get`` and ``_check_signal`` are ``Driver``'s.
    """

    def _loop(self) -> None:
        """Runs the control loop under the experiment's schedule (``rlplat.controller``)."""
        now = time.monotonic()
        self.loop_started = now
        self.start_actor_steps = self.actor_steps
        self.start_learner_steps = self.learner_steps
        env_rate, learn_rate = progress.RateMeter(), progress.RateMeter()
        env_rate.update(self.actor_steps, now)
        learn_rate.update(self.learner_steps, now)
        self.env_rate, self.learn_rate = env_rate, learn_rate
        self.pending: Dict[Any, tuple] = {}
        self.train_ref, self.train_submitted = None, now
        self.eval_ref = None
        self.ckpt_ref = None
        self.stopping = False          # a stop reason came up, learner asked to stop
        self.learner_stopped = False
        self.steady_start = self.steady_end = None  # (time, actor steps, learner steps)
        self._submit_train()
        self._tend_actors()
        stop_event = self.stop_event
        self.controller.run(self, None if stop_event is None else stop_event.is_set)
        self.stop_reason = self.controller.stop_reason
        self.loop_ended = time.monotonic()

    # ------------------------------------------------- controller.Program
    def steps(self) -> int:
        return self.actor_steps

    def eval_return(self) -> Optional[float]:
        return self.eval.get("eval_return")

    def advance(self, max_steps: Optional[int]) -> bool:
        """Half a second of handling results, replacing actors and checking for stalls."""
        del max_steps  # actors run their chunks on their own; the budget is counted here
        self._check_signal()  # SIGINT/SIGTERM: leave for Driver.run's final checkpoint
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
        self.stop_deadline = time.monotonic() + self.cfg.stop_timeout_s
        self.learner.request_stop.remote()

    def evaluate(self, video: bool) -> bool:
        if self.eval_ref is not None:
            return False
        self.evals_started += 1
        self.eval_ref = self.evaluator.evaluate.remote(self.experiment.eval_episodes, video)
        # The evaluator pulls its weights as it starts, so the result
        # belongs to the step counts of now, not of when it returns.
        self.pending[self.eval_ref] = ("eval", self.actor_steps)
        return True

    def checkpoint(self) -> bool:
        if self.ckpt_ref is not None:
            return False
        self.ckpt_ref = self.learner.save_checkpoint.remote(self.cfg.call_timeout_s)
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
            tag = self.pending.pop(ref)
            handler = getattr(self, f"_on_{tag[0]}")
            handler(ref, *tag[1:])

    def _submit_train(self) -> None:
        self.train_ref = self.learner.train.remote(self.cfg.learner_chunk_steps)
        self.train_submitted = time.monotonic()
        self.pending[self.train_ref] = ("train",)

    # ------------------------------------------------------------ result handlers
    def _on_train(self, ref) -> None:
        self.train_ref = None
        try:
            metrics = self._get(ref, self.cfg.call_timeout_s, "learner")
        except RunFailedError as e:
            if not self.colocate:
                self._check_replay_alive()  # a dead replay server explains a failed learner
            raise RunFailedError(f"learner failed: {errors.one_line(e.__cause__ or e)}; the run cannot "
                                 "continue (fix the cause, then continue with --resume)") from None
        self.learner_steps = int(metrics.get("learner_steps", self.learner_steps))
        if "replay_inserts_before_first_step" in metrics:  # whether a resumed learner had to refill
            self.loggers["driver"].write(self.actor_steps, {
                "event": "learner_first_step", "learner_steps": self.learner_steps,
                "replay_inserts_before_first_step": int(metrics["replay_inserts_before_first_step"])})
        self.learn_rate.update(self.learner_steps)
        self.last_learner_metrics = metrics
        if self.stopping:
            self.learner_stopped = True
        else:
            self._submit_train()

    def _on_eval(self, ref, actor_steps: int) -> None:
        self.eval_ref = None
        try:
            result = self._get(ref, self.cfg.call_timeout_s, "evaluator")
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
        self.eval = result
        if result.get("eval_return") is not None:
            self.evaluations.append((int(actor_steps), float(result["eval_return"])))
        version = result.get("policy_version")
        learner_steps = int(version) if version is not None and version >= 0 else self.learner_steps
        self.loggers["evaluator"].write(actor_steps, driver_records.finite({
            **result, "learner_steps": learner_steps}))
        if video:
            self._save_eval_video(video, actor_steps)

    def _save_eval_video(self, video: Dict[str, Any], actor_steps: int) -> None:
        """``<logdir>/videos/eval-<actor steps>.mp4``, the GIF in TensorBoard, a driver event."""
        folder = os.path.join(self.logdir, "videos")
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
            saved = self._get(ref, self.cfg.call_timeout_s, "checkpoint")
        except RunFailedError as e:
            self.console.message(f"checkpoint failed ({errors.one_line(e.__cause__ or e)}); will retry")
            return
        self._record_checkpoint(saved)

    def _record_checkpoint(self, saved: Dict[str, Any]) -> None:
        self.checkpoint_path = saved.get("path") or self.checkpoint_path
        values = {"actor_steps": self.actor_steps, "episodes": self.episodes,
                  "actor_restarts": self.restarts, "learner_steps": int(saved["step"])}
        if "replay_items" in saved:
            values["replay_items"] = int(saved["replay_items"])
        if "replay_error" in saved:
            self.console.message(f"replay checkpoint failed ({saved['replay_error']}); the learner "
                                 "checkpoint is kept, and a resume uses an older replay checkpoint")
        counters.save_counters(self.logdir, int(saved["step"]), values)

    # ------------------------------------------------------------ periodic work
    def _periodic(self) -> None:
        if not self._read_replay():
            self._check_replay_alive()
        versions = [s.policy_version for s in self.slots if s.policy_version >= 0 and s.active]
        # Actors can hold weights newer than the last train() result the driver
        # has seen (they pull mid-call), so clamp instead of showing a negative lag.
        lag = max(0.0, self.learner_steps - sum(versions) / len(versions)) if versions else None
        metrics = dict(getattr(self, "last_learner_metrics", {}))
        metrics.update({"learner_steps_per_second": self.learn_rate.rate(),
                        "env_steps_per_second": self.env_rate.rate(),
                        "actor_steps": self.actor_steps, "policy_lag": lag,
                        "actor_restarts": self.restarts, "replay_probe_misses": self.replay_probe_misses,
                        **{k: v for k, v in self.replay_stats.items()}})
        self.loggers["learner"].write(self.learner_steps, driver_records.finite(metrics))
        self.console.show(progress.format_status(
            actor_steps=self.actor_steps, max_actor_steps=self.max_actor_steps,
            learner_steps=self.learner_steps, env_steps_per_s=self.env_rate.rate(),
            learner_steps_per_s=self.learn_rate.rate(), eval_return=self.eval.get("eval_return"),
            eval_version=self.eval.get("policy_version"), replay_size=self.replay_stats.get("replay_size"),
            samples_per_insert=self.replay_stats.get("samples_per_insert"),
            policy_version=min(versions) if versions else None, policy_lag=lag, restarts=self.restarts))
        if time.monotonic() >= self.next_status_publish:
            self.next_status_publish = time.monotonic() + status_board.PUBLISH_PERIOD_S
            self._publish_status()

    def _publish_status(self, final: bool = False) -> None:
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

    def _read_replay(self, timeout_s: float = 2.0) -> bool:
        """Refreshes ``replay_stats`` from the server's table info; False if it did not answer."""
        from rlplat.replay import errors as replay_errors  # pylint: disable=g-import-not-at-top

        infos = replay_errors.probe_server(self.replay_address, timeout_s)
        if infos is None:
            return False
        size = sum(i.current_size for i in infos.values())
        inserts = sum(i.rate_limiter_info.insert_stats.completed for i in infos.values())
        samples = sum(i.rate_limiter_info.sample_stats.completed for i in infos.values())
        previous = self.replay_stats
        stats = {"replay_size": size, "replay_inserts": inserts, "replay_samples": samples,
                 "samples_per_insert": samples / inserts if inserts else math.nan}
        d_inserts = inserts - previous.get("replay_inserts", 0)
        d_samples = samples - previous.get("replay_samples", 0)
        stats["samples_per_insert_recent"] = d_samples / d_inserts if d_inserts > 0 else math.nan
        self.replay_stats = stats
        return True

    def _check_replay_alive(self) -> None:
        if self.replay_address is None:
            return
        for _ in range(2):  # more misses in a row: one slow answer on a busy box is not death
            if self._read_replay(timeout_s=5.0):
                return
            # A signal that came while we probed wins over the verdict: the user
            # asked to stop (and for a checkpoint), and a frozen or busy learner
            # is then the stop path's business, with its own budget.
            self._check_signal()
        # Silence alone is not death: on an overloaded machine the server's
        # gRPC threads can miss 12 s of probes (a bench run beside the test
        # suite lost its learner so). Ray knows whether the hosting process is
        # gone; one that is alive but stuck is the stall timeouts' business.
        if not self._replay_host_dead():
            self.replay_probe_misses += 1
            return
        if self.colocate:
            raise RunFailedError(
                f"learner failed: its process, which also hosts the replay server at "
                f"{self.replay_address}, no longer answers; the run cannot continue (check the "
                "learner's worker log, then continue with --resume)")
        raise RunFailedError(
            f"replay server died; {self.replay_address} no longer answers, and actors and learner "
            "cannot go on without it (check its node and the worker logs, then continue with --resume)")

    def _replay_host_dead(self) -> bool:
        """True when Ray reports the process hosting the replay server dead."""
        host = self.learner if self.colocate else self.replay
        if host is None:
            return True
        ref = host.__ray_ready__.remote()
        ready, _ = self._wait([ref], 1, 5.0)  # in slices: a signal is still acted on within 0.5 s
        if not ready:
            return False  # alive, or not known dead yet: the next check asks again
        try:
            ray.get(ref, timeout=self.cfg.call_timeout_s)
        except ray.exceptions.RayError:
            return True
        return False

    def _check_stalls(self, now: float) -> None:
        if self.train_ref is not None and now - self.train_submitted > self.cfg.learner_stall_timeout_s:
            self._check_replay_alive()
            raise RunFailedError(
                f"learner made no progress for {self.cfg.learner_stall_timeout_s:g}s (a train call of "
                f"{self.cfg.learner_chunk_steps} steps never returned); the run cannot continue")
        if self.stopping and now > self.stop_deadline:
            raise RunFailedError(
                f"learner did not stop within {self.cfg.stop_timeout_s:g}s of being asked; "
                "giving up without a final checkpoint")
        for slot in self.slots:
            if slot.ref is not None and now - slot.submitted > self.cfg.actor_stall_timeout_s:
                self.pending.pop(slot.ref, None)
                slot.ref = None
                self._actor_failed(slot, f"a chunk of {slot.chunk} steps ran over "
                                         f"{self.cfg.actor_stall_timeout_s:g}s")
