"""The driver loop behind ``run_on_ray``: starts workers, keeps them busy, logs, stops.

See ``layout.py`` for the start order, stopping, counters, failure handling
and where logs go; this module is the machinery.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import threading
import time
import uuid
from typing import Any, Dict, List, Optional

import ray

from rlplat.distributed import cluster
from rlplat.distributed import counters
from rlplat.distributed import errors
from rlplat.distributed import placement
from rlplat.distributed import progress
from rlplat.distributed import resources
from rlplat.distributed import seeding
from rlplat.distributed import process
from rlplat.distributed import workers
from rlplat.distributed.errors import RunFailedError, RunInterrupted
from rlplat.distributed.layout import RayLayoutConfig

# After SIGINT/SIGTERM the learner gets this long to reach a step boundary for
# a last checkpoint; process managers usually escalate to SIGKILL after ~30 s.
_SIGNAL_STOP_TIMEOUT_S = 10.0


# -------------------------------------------------------------------- driver
class _ActorSlot:
    """Driver-side bookkeeping of one actor."""

    def __init__(self, index: int, seed: int, handle):
        self.index, self.seed, self.handle = index, seed, handle
        self.ref = None          # the run_steps call in flight
        self.chunk = 0
        self.submitted = 0.0
        self.failures = 0
        self.dead = False
        self.retry_at = 0.0      # after a failure, resubmit no earlier than this
        self.policy_version = -1
        self.steps = 0
        self.total_failures = 0
        self.chunks_after_restart = 0  # chunks run by a Ray-restarted process

    def describe(self) -> Dict[str, Any]:
        return {"index": self.index, "seed": self.seed, "steps": self.steps,
                "policy_version": self.policy_version, "failures": self.total_failures,
                "chunks_after_restart": self.chunks_after_restart, "given_up": self.dead}


class Driver:
    """State and control loop of one ``run_on_ray`` call."""

    def __init__(self, builder, env, env_kwargs, num_actors, num_replicas, max_actor_steps, logdir,
                 seed, restored_step, address, console, layout: RayLayoutConfig):
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
        self.slots: List[_ActorSlot] = []
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
        return self._summary(time.monotonic() - started)

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

    # --------------------------------------------------------------- start-up
    def _start(self) -> None:
        from envs import make_environment  # pylint: disable=g-import-not-at-top
        from rlplat import specs  # pylint: disable=g-import-not-at-top

        # The driver builds the environment once: a bad name fails here, before
        # any process starts, and the spec sizes replay and learner.
        with make_environment(self.env, seed=self.seed, **self.env_kwargs) as environment:
            self.spec = specs.make_environment_spec(environment)

        self.connection = cluster.connect(self.address, log_to_driver=self.cfg.log_to_driver)
        self._install_signal_handlers()
        where = "local Ray" if self.connection.local else "Ray cluster"
        self.console.message(f"{where} at {self.connection.address} (worker logs: "
                             f"{os.path.join(self.connection.session_dir, 'logs')})")
        self.nodes = resources.nodes_from_ray(ray.nodes())
        total_cpus = sum(n.resources.get("CPU", 0.0) for n in self.nodes)
        node_gpus = max([n.resources.get("GPU", 0.0) for n in self.nodes] or [0])
        self.plan = resources.plan_resources(
            total_cpus, node_gpus, self.num_actors, self.num_replicas, nodes=self.nodes,
            actor_resources=self.cfg.actor_resources, learner_resources=self.cfg.learner_resources,
            actor_cpus=self.cfg.actor_cpus, learner_cpus=self.cfg.learner_cpus,
            num_learner_workers=self.cfg.num_learner_workers)
        self.num_replicas = self.plan.num_learner_replicas
        if self.cfg.learner_threads is not None:
            self.plan = dataclasses.replace(self.plan, learner_threads=tuple(self.cfg.learner_threads))
        colocate = self.cfg.colocate_replay
        self.colocate = self.connection.local if colocate is None else bool(colocate)
        if self.cfg.num_learner_workers > 1:
            self.colocate = False  # A learner group samples over gRPC from one shared server.
        replay_host = "127.0.0.1" if self.connection.local else None
        self.console.message(f"placement: {self.plan.describe()}; replay "
                             f"{'inside the learner' if self.colocate else 'in its own process'}")

        if self.restored_step is not None:
            saved = counters.load_counters(self.logdir, self.restored_step)
            self.actor_steps = int(saved.get("actor_steps", 0))
            self.episodes = int(saved.get("episodes", 0))
            self.restarts = int(saved.get("actor_restarts", 0))
        self._open_loggers()
        self._write_run_info()

        if not self.colocate:
            self.replay = workers.remote(
                workers.ReplayServer, num_cpus=self.plan.replay_cpus, max_restarts=0,
                runtime_env=process.runtime_env("replay"), **placement.ray_options(self.plan, "replay"),
            ).remote(self.builder, self.spec, self.num_actors, replay_host)
            self.replay_address = self._get(self.replay.address.remote(), self.cfg.startup_timeout_s,
                                            "replay server start")

        # Named, so workers that Ray may restart find it by name rather than
        # through a handle argument (see RemoteVariableSource).
        self.learner_name = f"rlplat-learner-{uuid.uuid4().hex[:12]}"
        if self.cfg.num_learner_workers > 1:
            self.learner = self._start_learner_group()
        else:
            self.learner = workers.remote(
                workers.LearnerWorker, num_cpus=self.plan.learner_cpus, num_gpus=self.plan.learner_gpus,
                max_concurrency=4, max_restarts=0, name=self.learner_name,
                runtime_env=process.runtime_env("learner", cpu_only=not self.plan.learner_gpus,
                                                threads=self.plan.learner_threads[0]),
                **placement.ray_options(self.plan, "learner"),
            ).remote(self.builder, self.spec, self.num_replicas, self.replay_address, self.logdir,
                     num_actors=self.num_actors, replay_host=replay_host,
                     resume=self.restored_step is not None, threads=self.plan.learner_threads,
                     use_gpus=bool(self.plan.learner_gpus))

        # Actors and evaluator start now, so their imports overlap with the
        # learner's build; each asks the learner for the replay address and
        # its first weights, which Ray answers once the learner is up.
        actor_cls = workers.remote(
            workers.ActorWorker, num_cpus=self.plan.actor_cpus, max_restarts=self.cfg.actor_max_restarts,
            max_task_retries=0, runtime_env=process.runtime_env("actor"),
            **placement.ray_options(self.plan, "actor"))
        for i in range(self.num_actors):
            actor_seed = seeding.actor_seed(self.seed, i)
            handle = actor_cls.remote(self.builder, self.env, self.env_kwargs, i, actor_seed,
                                      self.learner_name, None,
                                      weights_timeout_s=self.cfg.weights_timeout_s,
                                      startup_timeout_s=self.cfg.startup_timeout_s)
            self.slots.append(_ActorSlot(i, actor_seed, handle))
        self.evaluator = workers.remote(
            workers.Evaluator, num_cpus=self.plan.evaluator_cpus, max_restarts=1, max_task_retries=0,
            runtime_env=process.runtime_env("evaluator"),
        ).remote(self.builder, self.env, self.env_kwargs, seeding.role_seed(self.seed, "evaluator"),
                 self.learner_name, weights_timeout_s=self.cfg.weights_timeout_s,
                 startup_timeout_s=self.cfg.startup_timeout_s)

        ready = self._get(self.learner.ready.remote(), self.cfg.startup_timeout_s, "learner start")
        self.replay_address = ready["replay_address"]
        self.learner_steps = int(ready["learner_steps"])
        self.learner_workers = int(ready.get("num_workers", 1))
        group = f" in {self.learner_workers} learner workers" if self.learner_workers > 1 else ""
        self.console.message(f"learner up: {ready['num_replicas']} replica(s){group} on "
                             f"{', '.join(ready['devices'])}; step {self.learner_steps:,}; "
                             f"replay at {self.replay_address}")
        self._report_placement()

    def _report_placement(self) -> None:
        """Prints the node each worker landed on; records it in run_info.json.

        With a learner group, each learner worker (process) gets its own
        record and line, ``learner worker <i>`` with ``worker_index`` and
        ``is_chief``; ``learner group`` is the coordinating actor.
        """
        members = self._learner_group_members()
        named = [("learner group" if members else "learner", self.learner), ("replay", self.replay)]
        named += [(f"learner worker {i}", handle) for i, handle in enumerate(members)]
        named += [("evaluator", self.evaluator)] + [(f"actor {s.index}", s.handle) for s in self.slots]
        self.node_placement = placement.locate(named, self.nodes, self.cfg.call_timeout_s)
        for i in range(len(members)):
            where = self.node_placement.get(f"learner worker {i}")
            self.node_placement[f"learner worker {i}"] = where and {**where, "worker_index": i,
                                                                     "is_chief": i == 0}
        if self.colocate:
            self.node_placement["replay"] = dict(self.node_placement.get("learner") or {}, colocated=True)
        for line in placement.describe(self.node_placement):
            self.console.message(f"placement: {line}")
        placement.update_run_info(self.logdir, {"node_placement": self.node_placement})

    def _start_learner_group(self):
        """``--num-learner-workers W > 1``: a LearnerGroup actor named as the learner.

        The group (no TF, 0 CPUs, pinned next to the chief) starts W learner
        processes and answers the same calls a LearnerWorker does. Each worker
        asks for the plan's per-worker learner CPUs, GPUs and custom resources
        (e.g. ``learner=1``) and, on a cluster, is pinned to the node the plan
        gave it: the chief (worker 0) to the replay server's node.
        """
        from rlplat.distributed import learner_group  # pylint: disable=g-import-not-at-top

        num_workers = self.cfg.num_learner_workers
        return workers.remote(
            learner_group.LearnerGroup, num_cpus=0, max_concurrency=8, max_restarts=0,
            name=self.learner_name,
            # Not cpu_only: members inherit these env_vars, and GPU members need CUDA visible.
            runtime_env=process.runtime_env("learner-group", cpu_only=False),
            **placement.ray_options(self.plan, "learner_group"),
        ).remote(self.builder, self.spec, num_workers, self.replay_address, self.logdir,
                 resume=self.restored_step is not None, threads=self.plan.learner_threads,
                 use_gpus=bool(self.plan.learner_gpus), num_cpus=self.plan.learner_cpus,
                 num_gpus=self.plan.learner_gpus,
                 member_options=[placement.ray_options(self.plan, "learner", i)
                                 for i in range(num_workers)],
                 build_timeout_s=self.cfg.startup_timeout_s, call_timeout_s=self.cfg.call_timeout_s,
                 train_timeout_s=self.cfg.learner_stall_timeout_s,
                 collective_timeout_s=self.cfg.learner_stall_timeout_s,
                 name_prefix=self.learner_name)

    def _learner_group_members(self) -> List[Any]:
        """Handles of the learner group's workers, chief first; [] for one learner worker.

        Looked up by name (``learner_group.member_name``); a member that is
        gone maps to None, which the placement report shows as not up.
        """
        if getattr(self, "learner_workers", 1) <= 1:
            return []
        from rlplat.distributed import learner_group  # pylint: disable=g-import-not-at-top

        members = []
        for i in range(self.learner_workers):
            try:
                members.append(ray.get_actor(learner_group.member_name(self.learner_name, i)))
            except ValueError:
                members.append(None)
        return members

    def _open_loggers(self) -> None:
        from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top

        resumed = self.restored_step is not None
        purge = {"learner": self.restored_step, "actor": self.actor_steps, "evaluator": self.actor_steps}
        for role in ("actor", "learner", "evaluator"):
            self.loggers[role] = loggers.make_logger(
                self.logdir, role, purge_after_step=purge[role] if resumed else None)

    def _write_run_info(self) -> None:
        from rlplat.utils import run_info  # pylint: disable=g-import-not-at-top

        agent_config = getattr(self.builder, "config", None)
        agent_config = agent_config.to_dict() if hasattr(agent_config, "to_dict") else {}
        config = {"agent": agent_config, "env": self.env, "env_kwargs": self.env_kwargs,
                  "num_actors": self.num_actors, "num_learner_replicas": self.num_replicas,
                  "max_actor_steps": None if self.max_actor_steps == math.inf else self.max_actor_steps,
                  "seed": self.seed,
                  "layout": dataclasses.asdict(self.cfg)}
        run_info.write_run_info(self.logdir, config, extra={
            "layout": "ray", "builder": type(self.builder).__name__,
            "ray_address": self.connection.address, "ray_local": self.connection.local,
            "placement": dataclasses.asdict(self.plan), "colocate_replay": self.colocate,
            "actor_seeds": [seeding.actor_seed(self.seed, i) for i in range(self.num_actors)],
            "resumed_from_step": self.restored_step})

    # ---------------------------------------------------------------- the loop
    def _loop(self) -> None:
        cfg = self.cfg
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
        self.stopping = False          # max_actor_steps reached, learner asked to stop
        self.learner_stopped = False
        self.steady_start = self.steady_end = None  # (time, actor steps, learner steps)
        every = cfg.eval_every_actor_steps
        self.next_eval = (self.actor_steps // every + 1) * every if every else math.inf
        next_console = now + cfg.console_every_s
        next_checkpoint = now + cfg.checkpoint_every_s
        next_eval_time = now + cfg.eval_every_s if cfg.eval_every_s else math.inf
        self._submit_train()
        for slot in self.slots:
            self._submit_actor(slot)

        while not self.learner_stopped:
            if not self.stopping and (self.actor_steps >= self.max_actor_steps or self._target_reached()):
                self.stopping = True
                self.stop_deadline = time.monotonic() + cfg.stop_timeout_s
                self.learner.request_stop.remote()
            self._wait_and_handle(0.5)
            now = time.monotonic()
            for slot in self.slots:
                if slot.ref is None and not slot.dead and now >= slot.retry_at:
                    self._submit_actor(slot)
            self._check_stalls(now)
            if now >= next_console:
                next_console = now + cfg.console_every_s
                self._periodic()
            eval_due = self.actor_steps >= self.next_eval or now >= next_eval_time
            if eval_due and self.eval_ref is None and not self.stopping:
                if every:
                    self.next_eval = (self.actor_steps // every + 1) * every
                if cfg.eval_every_s:
                    next_eval_time = now + cfg.eval_every_s
                self.eval_ref = self.evaluator.evaluate.remote(cfg.eval_episodes)
                self.pending[self.eval_ref] = ("eval",)
            if now >= next_checkpoint and self.ckpt_ref is None and not self.stopping:
                next_checkpoint = now + cfg.checkpoint_every_s
                self.ckpt_ref = self.learner.save_checkpoint.remote(cfg.call_timeout_s)
                self.pending[self.ckpt_ref] = ("checkpoint",)
        self.loop_ended = time.monotonic()
        self._periodic()

    def _target_reached(self) -> bool:
        target, latest = self.cfg.target_eval_return, self.eval.get("eval_return")
        return target is not None and latest is not None and latest >= target

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

    def _submit_actor(self, slot: _ActorSlot) -> None:
        if self.learner_stopped or slot.dead:
            return
        scheduled = self.actor_steps + sum(s.chunk for s in self.slots if s.ref is not None)
        remaining = self.max_actor_steps - scheduled
        if remaining <= 0 and not self.stopping:
            return  # Idle until the learner is asked to stop (then all run again).
        chunk = self.cfg.actor_chunk_steps if self.stopping else min(self.cfg.actor_chunk_steps,
                                                                      remaining)
        slot.chunk, slot.submitted = chunk, time.monotonic()
        slot.ref = slot.handle.run_steps.remote(chunk)
        self.pending[slot.ref] = ("actor", slot)

    def _submit_train(self) -> None:
        self.train_ref = self.learner.train.remote(self.cfg.learner_chunk_steps)
        self.train_submitted = time.monotonic()
        self.pending[self.train_ref] = ("train",)

    # ------------------------------------------------------------ result handlers
    def _on_actor(self, ref, slot: _ActorSlot) -> None:
        slot.ref = None
        try:
            stats = ray.get(ref, timeout=self.cfg.call_timeout_s)
        except ray.exceptions.RayActorError as e:
            # The process died; Ray is already restarting it (max_restarts).
            self._actor_failed(slot, errors.one_line(e), died=True)
            return
        except ray.exceptions.RayError as e:
            # run_steps raised; the process lives on in an unknown state.
            self._actor_failed(slot, errors.one_line(e), died=False)
            return
        slot.failures = 0  # A full chunk since the last failure: it recovered.
        slot.chunks_after_restart += bool(stats.get("restarted"))
        slot.seed = int(stats.get("seed", slot.seed))  # a restarted process reseeds itself
        steps = int(stats.get("env_steps", slot.chunk))
        self.actor_steps += steps
        slot.steps += steps
        slot.policy_version = int(stats.get("policy_version", -1))
        returns = _episode_returns(stats)
        self.episodes += int(stats.get("episodes", len(returns)))
        self.env_rate.update(self.actor_steps)
        now = time.monotonic()
        if self.steady_start is None:  # rates from the first result on leave start-up out
            self.steady_start = (now, self.actor_steps, self.learner_steps)
        self.steady_end = (now, self.actor_steps, self.learner_steps)
        record = {"actor_index": slot.index, "actor_steps_per_second": stats.get("steps_per_second"),
                  "env_steps_per_second": self.env_rate.rate(), "policy_version": slot.policy_version,
                  "policy_lag": max(0, self.learner_steps - slot.policy_version),
                  "episodes": self.episodes}
        if returns:
            record["episode_return"] = sum(returns) / len(returns)
        record.update(_time_breakdown(stats))
        self.loggers["actor"].write(self.actor_steps, _finite(record))
        self._submit_actor(slot)

    def _actor_failed(self, slot: _ActorSlot, reason: str, died: bool) -> None:
        self._check_replay_alive()  # A dead replay server explains a failing actor best.
        slot.failures += 1
        slot.total_failures += 1
        self.restarts += 1
        if slot.failures > self.cfg.actor_max_restarts:
            slot.dead = True
            _kill(slot.handle)
            self.console.message(f"actor {slot.index} failed {slot.failures} times in a row; giving it "
                                 f"up ({reason})")
            if all(s.dead for s in self.slots):
                raise RunFailedError(f"every actor failed; last error: {reason}")
            return
        self.console.message(f"actor {slot.index} failed ({reason}); restarting it")
        if not died:
            # It raised but lives on in an unknown state: kill it so Ray starts
            # a fresh process (counted against max_restarts). One that died is
            # already being restarted; calls made meanwhile wait for it.
            try:
                ray.kill(slot.handle, no_restart=False)
            except Exception:  # pylint: disable=broad-except
                pass
        slot.retry_at = time.monotonic() + 1.0

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
        self.learn_rate.update(self.learner_steps)
        self.last_learner_metrics = metrics
        if self.stopping:
            self.learner_stopped = True
        else:
            self._submit_train()

    def _on_eval(self, ref) -> None:
        self.eval_ref = None
        try:
            result = self._get(ref, self.cfg.call_timeout_s, "evaluator")
        except RunFailedError as e:
            self.console.message(f"evaluation failed ({errors.one_line(e.__cause__ or e)}); will retry")
            return
        self._log_eval(result)

    def _log_eval(self, result: Dict[str, Any]) -> None:
        self.eval = result
        self.loggers["evaluator"].write(self.actor_steps, _finite({
            **result, "learner_steps": self.learner_steps}))

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
        counters.save_counters(self.logdir, int(saved["step"]), {
            "actor_steps": self.actor_steps, "episodes": self.episodes,
            "actor_restarts": self.restarts, "learner_steps": int(saved["step"])})

    # ------------------------------------------------------------ periodic work
    def _periodic(self) -> None:
        if not self._read_replay():
            self._check_replay_alive()
        versions = [s.policy_version for s in self.slots if s.policy_version >= 0 and not s.dead]
        # Actors can hold weights newer than the last train() result the driver
        # has seen (they pull mid-call), so clamp instead of showing a negative lag.
        lag = max(0.0, self.learner_steps - sum(versions) / len(versions)) if versions else None
        metrics = dict(getattr(self, "last_learner_metrics", {}))
        metrics.update({"learner_steps_per_second": self.learn_rate.rate(),
                        "env_steps_per_second": self.env_rate.rate(),
                        "actor_steps": self.actor_steps, "policy_lag": lag,
                        **{k: v for k, v in self.replay_stats.items()}})
        self.loggers["learner"].write(self.learner_steps, _finite(metrics))
        self.console.show(progress.format_status(
            actor_steps=self.actor_steps, max_actor_steps=self.max_actor_steps,
            learner_steps=self.learner_steps, env_steps_per_s=self.env_rate.rate(),
            learner_steps_per_s=self.learn_rate.rate(), eval_return=self.eval.get("eval_return"),
            eval_version=self.eval.get("policy_version"), replay_size=self.replay_stats.get("replay_size"),
            samples_per_insert=self.replay_stats.get("samples_per_insert"),
            policy_version=min(versions) if versions else None, policy_lag=lag, restarts=self.restarts))

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
        if self.colocate:
            raise RunFailedError(
                f"learner failed: its process, which also hosts the replay server at "
                f"{self.replay_address}, no longer answers; the run cannot continue (check the "
                "learner's worker log, then continue with --resume)")
        raise RunFailedError(
            f"replay server died; {self.replay_address} no longer answers, and actors and learner "
            "cannot go on without it (check its node and the worker logs, then continue with --resume)")

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
                                         f"{self.cfg.actor_stall_timeout_s:g}s", died=False)

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
            for slot in self.slots:
                if slot.ref is None and not slot.dead and time.monotonic() >= slot.retry_at:
                    self._submit_actor(slot)
        self.learner_stopped = True
        if getattr(self, "train_ref", None) is not None:
            raise RunFailedError(f"learner did not reach a step boundary within {timeout_s:g}s")
        for slot in self.slots:  # No more data is needed: stop acting now.
            _kill(slot.handle)
            slot.dead = True
        saved = self._get(self.learner.save_checkpoint.remote(self.cfg.call_timeout_s),
                          max(1.0, deadline - time.monotonic()) + self.cfg.call_timeout_s,
                          "final checkpoint")
        self._record_checkpoint(saved)
        if final_eval:
            result = self._get(self.evaluator.evaluate.remote(self.cfg.eval_episodes),
                               self.cfg.call_timeout_s * 5, "final evaluation")
            self._log_eval(result)

    def _teardown(self) -> None:
        self._tearing_down = True
        if ray.is_initialized():
            for handle in [s.handle for s in self.slots] + [self.evaluator, self.learner, self.replay]:
                _kill(handle)
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

    def _summary(self, seconds: float) -> Dict[str, Any]:
        """Counts, rates and where the time went.

        ``env_steps_per_second`` and ``learner_steps_per_second`` are measured
        from the first actor result to the last one (steady state: worker
        start-up, the final checkpoint and shutdown are left out).
        """
        start, end = getattr(self, "steady_start", None), getattr(self, "steady_end", None)
        env_rate = learn_rate = None
        if start and end and end[0] > start[0]:
            env_rate = (end[1] - start[1]) / (end[0] - start[0])
            learn_rate = (end[2] - start[2]) / (end[0] - start[0])
        loop_s = None
        if hasattr(self, "loop_started"):
            loop_s = getattr(self, "loop_ended", time.monotonic()) - self.loop_started
        return {
            "actor_steps": self.actor_steps, "learner_steps": self.learner_steps,
            "episodes": self.episodes, "actor_restarts": self.restarts,
            "eval_return": self.eval.get("eval_return"), "eval_policy_version": self.eval.get("policy_version"),
            "actor_policy_versions": [s.policy_version for s in self.slots],
            "actor_seeds": [s.seed for s in self.slots],
            "actors": [s.describe() for s in self.slots],
            "env_steps_per_second": env_rate, "learner_steps_per_second": learn_rate,
            "samples_per_insert": self.replay_stats.get("samples_per_insert"),
            "replay_size": self.replay_stats.get("replay_size"),
            "checkpoint": self.checkpoint_path, "logdir": self.logdir, "seconds": seconds,
            "colocate_replay": getattr(self, "colocate", None),
            "learner_workers": getattr(self, "learner_workers", None),
            "placement": self.plan.describe() if hasattr(self, "plan") else None,
            "node_placement": getattr(self, "node_placement", None),
            "loop_s": loop_s, **self.phases,
        }


# ------------------------------------------------------------------- helpers
def _kill(handle) -> None:
    """Ends a worker for good (no Ray restart); a handle already dead is fine."""
    if handle is None:
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # pylint: disable=broad-except
        pass


def _episode_returns(stats: Dict[str, Any]) -> List[float]:
    for key in ("episode_returns", "returns"):
        value = stats.get(key)
        if isinstance(value, list):
            return [float(v) for v in value]
    return []


def _time_breakdown(stats: Dict[str, Any]) -> Dict[str, float]:
    """Where an actor's chunk went: seconds per part (env, policy, observe, update, other).

    ``EnvironmentLoop.run_steps`` reports ``env_s``, ``policy_s``,
    ``observe_s`` (the adder's writes), ``update_s`` (weight pulls) and
    ``wall_s``; the fractions make a slow part stand out in TensorBoard.
    """
    wall = stats.get("wall_s")
    if not isinstance(wall, (int, float)) or wall <= 0:
        return {}
    out = {}
    accounted = 0.0
    for part in ("env", "policy", "observe", "update"):
        value = stats.get(f"{part}_s")
        if isinstance(value, (int, float)):
            out[f"time_{part}_fraction"] = float(value) / wall
            accounted += float(value)
    out["time_other_fraction"] = max(0.0, wall - accounted) / wall
    return out


def _finite(record: Dict[str, Any]) -> Dict[str, Any]:
    """Drops None and non-finite values (they are 'not measured yet', not data)."""
    return {k: v for k, v in record.items()
            if v is not None and not (isinstance(v, float) and not math.isfinite(v))}
