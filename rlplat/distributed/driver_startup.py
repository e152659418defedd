"""Start-up of a ``run_on_ray`` run: replay, learner (or learner group), actors, evaluator.

``WorkerStartup`` is the part of ``driver.Driver`` that brings the workers up
in the order ``layout.py`` describes, reports where each one landed, opens the
loggers and writes ``run_info.json``. ``kill_worker`` ends a worker for good.
"""

from __future__ import annotations

import dataclasses
import math
import os
import uuid
from typing import Any, List

import ray

from rlplat.distributed import cluster
from rlplat.distributed import counters
from rlplat.distributed import placement
from rlplat.distributed import process
from rlplat.distributed import resources
from rlplat.distributed import seeding
from rlplat.distributed import workers
from rlplat.distributed.actor_slots import ActorSlot, RestartBudget


def kill_worker(handle) -> None:
    """Ends a worker for good (no Ray restart); a handle already dead is fine."""
    if handle is None:
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # pylint: disable=broad-except
        pass


class WorkerStartup:
    """Start-up methods of ``driver.Driver``.

    A mixin: the state lives in ``Driver.__init__``, and ``_get``, ``_wait``
    and the signal handling (``_check_signal``) are ``Driver``'s.
    """

    def _start(self) -> None:
        from rlplat_envs import make_environment  # pylint: disable=g-import-not-at-top
        from rlplat import specs  # pylint: disable=g-import-not-at-top

        # The driver builds the environment once: a bad name fails here, before
        # any process starts, and the spec sizes replay and learner.
        with make_environment(self.env, seed=self.seed, **self.env_kwargs) as environment:
            self.spec = specs.make_environment_spec(environment)
        self._check_signal()

        with cluster.keep_signal_handlers():  # a signal in ray.init still reaches our handler
            self.connection = cluster.connect(self.address, log_to_driver=self.cfg.log_to_driver,
                                              allow_unauthenticated=self.cfg.allow_unauthenticated_ray)
        self._install_signal_handlers()
        self._check_signal()
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

        replay_restore = None
        if not self.colocate:
            self.replay = workers.remote(
                workers.ReplayServer, num_cpus=self.plan.replay_cpus, max_restarts=0,
                runtime_env=process.runtime_env("replay"), **placement.ray_options(self.plan, "replay"),
            ).remote(self.builder, self.spec, self.num_actors, replay_host,
                     checkpoint_logdir=self.logdir if self.cfg.replay_checkpoint else None,
                     restore_step=self.restored_step)
            self.replay_address = self._get(self.replay.address.remote(), self.cfg.startup_timeout_s,
                                            "replay server start")
            replay_restore = self._get(self.replay.restore_info.remote(), self.cfg.call_timeout_s,
                                       "replay server")

        # Named, so workers that Ray may restart find it by name rather than
        # through a handle argument (see RemoteVariableSource).
        self.learner_name = f"rlplat-learner-{uuid.uuid4().hex[:12]}"
        if self.cfg.num_learner_workers > 1:
            self.learner = self._start_learner_group()
        else:
            learner_env = process.runtime_env("learner", cpu_only=not self.plan.learner_gpus,
                                              threads=self.plan.learner_threads[0])
            if self.cfg.debug_eager:  # breakpoint() in the step waits for `ray debug` to attach
                learner_env["env_vars"]["RAY_DEBUG"] = "legacy"
            self.learner = workers.remote(
                workers.LearnerWorker, num_cpus=self.plan.learner_cpus, num_gpus=self.plan.learner_gpus,
                max_concurrency=4, max_restarts=0, name=self.learner_name,
                runtime_env=learner_env,
                **placement.ray_options(self.plan, "learner"),
            ).remote(self.builder, self.spec, self.num_replicas, self.replay_address, self.logdir,
                     num_actors=self.num_actors, replay_host=replay_host,
                     resume=self.restored_step is not None, threads=self.plan.learner_threads,
                     use_gpus=bool(self.plan.learner_gpus),
                     replay_checkpoint=self.cfg.replay_checkpoint, debug_eager=self.cfg.debug_eager)

        # Actors and evaluator start now, so their imports overlap with the
        # learner's build; each asks the learner for the replay address and
        # its first weights, which Ray answers once the learner is up.
        # max_restarts=0: the driver replaces a failed actor itself (see driver_actors).
        self._actor_cls = workers.remote(
            workers.ActorWorker, num_cpus=self.plan.actor_cpus, max_restarts=0,
            max_task_retries=0, runtime_env=process.runtime_env("actor"),
            **placement.ray_options(self.plan, "actor"))
        for i in range(self.num_actors):
            budget = RestartBudget(self.cfg.actor_max_restarts, self.cfg.actor_restart_window_s)
            self.slots.append(ActorSlot(i, seeding.actor_seed(self.seed, i), self._spawn_actor(i),
                                        budget))
        self.evaluator = workers.remote(
            workers.Evaluator, num_cpus=self.plan.evaluator_cpus, max_restarts=1, max_task_retries=0,
            runtime_env=process.runtime_env("evaluator"),
        ).remote(self.builder, self.env, self.env_kwargs, seeding.role_seed(self.seed, "evaluator"),
                 self.learner_name, weights_timeout_s=self.cfg.weights_timeout_s,
                 startup_timeout_s=self.cfg.startup_timeout_s, video=self.cfg.video_every_evals > 0)

        ready = self._get(self.learner.ready.remote(), self.cfg.startup_timeout_s, "learner start")
        self.replay_address = ready["replay_address"]
        self.learner_steps = int(ready["learner_steps"])
        self.learner_workers = int(ready.get("num_workers", 1))
        group = f" in {self.learner_workers} learner workers" if self.learner_workers > 1 else ""
        self.console.message(f"learner up: {ready['num_replicas']} replica(s){group} on "
                             f"{', '.join(ready['devices'])}; step {self.learner_steps:,}; "
                             f"replay at {self.replay_address}")
        if ready.get("eager"):
            self.console.message("--debug-eager: learner steps run eagerly (slow); a breakpoint() in "
                                 "the step function waits for `ray debug` (run it in another terminal)")
        self._report_placement()
        self._report_replay_restore(replay_restore or ready.get("replay_restore"))

    def _report_replay_restore(self, restore) -> None:
        """Says what replay started with (``--replay-checkpoint``): console, metrics.jsonl, run_info.

        ``replay_restored_items`` is 0 when nothing was restored: a new run, or
        a resume with no replay checkpoint (then it says so, in one line).
        """
        if restore is None:
            return
        items, path = int(restore["replay_restored_items"]), restore["replay_restored_from"]
        if path is not None:
            from rlplat.replay import checkpoints  # pylint: disable=g-import-not-at-top

            step = checkpoints.step_of(path)
            older = "" if step == self.restored_step else f", older than learner step {self.restored_step:,}"
            self.console.message(f"replay: restored {items:,} items from {path} (step {step:,}{older})")
        elif self.restored_step is not None:
            self.console.message(f"replay: no replay checkpoint for learner step {self.restored_step:,} "
                                 f"in {os.path.join(self.logdir, 'replay_checkpoints')}; starting with an "
                                 "empty replay (learning resumes once it holds the warm-up again)")
        record = {"replay_restored_items": items, "replay_restored_from": path,
                  **{k: int(restore.get(k, 0)) for k in ("replay_restored_inserts",
                                                          "replay_restored_samples")}}
        self.replay_restored_items = items
        self.loggers["driver"].write(self.actor_steps, {"event": "replay_restore", **record})
        placement.update_run_info(self.logdir, record)

    def _spawn_actor(self, index: int, incarnation: int = 0):
        """A new ``ActorWorker`` for actor ``index``; ``incarnation`` > 0 replaces a failed one."""
        return self._actor_cls.remote(self.builder, self.env, self.env_kwargs, index,
                                      seeding.actor_seed(self.seed, index), self.learner_name, None,
                                      weights_timeout_s=self.cfg.weights_timeout_s,
                                      startup_timeout_s=self.cfg.startup_timeout_s,
                                      incarnation=incarnation,
                                      prefetch_weights=self.cfg.prefetch_weights,
                                      envs_per_actor=self.cfg.envs_per_actor,
                                      shared_weights=self.cfg.shared_weights)

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
        self.node_placement = placement.locate(named, self.nodes, self.cfg.call_timeout_s,
                                               wait=self._wait)
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
                 name_prefix=self.learner_name, replay_checkpoint=self.cfg.replay_checkpoint)

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
        purge = {"learner": self.restored_step, "actor": self.actor_steps, "evaluator": self.actor_steps,
                 "driver": self.actor_steps}
        for role in ("actor", "learner", "evaluator", "driver"):
            # The driver's records are events (actor failures), not curves: JSONL only.
            self.loggers[role] = loggers.make_logger(
                self.logdir, role, purge_after_step=purge[role] if resumed else None,
                tensorboard=role != "driver")

    def _write_run_info(self) -> None:
        from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top
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
        self.loggers["learner"].write_text("config", loggers.config_markdown(config),
                                           step=self.restored_step or 0)
