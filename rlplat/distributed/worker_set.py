"""The workers of a ``run_on_ray`` run: replay, learner (or learner group), actors, evaluator.

``WorkerSet`` owns the handles and where each worker landed. It brings them
up in the order ``rlplat.runners.on_ray`` describes (``connect``, then
``launch`` and ``await_ready``, or ``start`` for both), replaces an actor (``spawn_actor``), and ends them all
(``kill_all``). ``kill_worker`` ends one worker for good.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import ray

from rlplat import replay_shards
from rlplat import run_dir
from rlplat.distributed import cluster
from rlplat.distributed import placement
from rlplat.distributed import process
from rlplat.distributed import resources
from rlplat import seeding
from rlplat.distributed import shared_host
from rlplat.distributed import workers
from rlplat.distributed.actor_slots import ActorSlot, RestartBudget
from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.distributed.progress import ConsoleLine
from rlplat.distributed.ray_calls import RayCalls
from rlplat.experiment import Experiment


def kill_worker(handle) -> None:
    """Ends a worker for good (no Ray restart); a handle already dead is fine."""
    if handle is None:
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # pylint: disable=broad-except
        pass


class WorkerSet:
    """The run's Ray workers and the plan that placed them.

    Args:
      experiment: the run (builder, environment, seed, number of actors, logdir).
      layout: placement, resources and timeouts.
      restored_step: the learner checkpoint to resume from (None: a new run).
      calls: the driver's signal-aware waits.
      console: where start-up is reported.
    """

    def __init__(self, experiment: Experiment, layout: RayLayoutConfig, restored_step: Optional[int],
                 calls: RayCalls, console: ConsoleLine):
        self.experiment, self.layout, self.restored_step = experiment, layout, restored_step
        self.calls, self.console = calls, console
        self.spec: Any = None                      # the environment's specs
        self.connection: Optional[cluster.Connection] = None
        self.nodes: List[Any] = []
        self.plan: Optional[resources.ResourcePlan] = None
        self.num_replicas: Optional[int] = layout.num_learner_replicas
        self.colocate = False                      # replay inside the learner process
        self.replay = None                         # its own ReplayServer (shard 0), unless colocated
        self.replay_shards: List[Any] = []         # every ReplayServer, shard order
        self.replay_address: Optional[str] = None
        self.replay_restore: Optional[Dict[str, Any]] = None
        self.learner = None                        # LearnerWorker, or a LearnerGroup
        self.learner_name = f"rlplat-learner-{uuid.uuid4().hex[:12]}"
        self.learner_workers = 1
        self.evaluator = None
        self.slots: List[ActorSlot] = []
        self.node_placement: Optional[Dict[str, Any]] = None
        self._placement_asked: Optional[Tuple[Dict[str, Any], int]] = None  # (refs by name, learner workers)
        self._actor_cls: Any = None

    # ---------------------------------------------------------------- start
    def describe_environment(self) -> None:
        """Builds the environment once: a bad name fails here, before any process starts."""
        from rlplat import specs  # pylint: disable=g-import-not-at-top

        with self.experiment.environment(self.experiment.seed) as environment:
            self.spec = specs.make_environment_spec(environment)

    def connect(self, reinstall_signal_handlers: Callable[[], None]) -> None:
        """Connects to Ray and plans where each role goes."""
        layout = self.layout
        with cluster.keep_signal_handlers():  # a signal in ray.init still reaches our handler
            self.connection = cluster.connect(layout.address, log_to_driver=layout.log_to_driver,
                                              allow_unauthenticated=layout.allow_unauthenticated_ray)
        reinstall_signal_handlers()
        self.calls.check_signal()
        where = "local Ray" if self.connection.local else "Ray cluster"
        self.console.message(f"{where} at {self.connection.address} (worker logs: "
                             f"{os.path.join(self.connection.session_dir, 'logs')})")
        self.nodes = resources.nodes_from_ray(ray.nodes())
        total_cpus = sum(n.resources.get("CPU", 0.0) for n in self.nodes)
        node_gpus = max([n.resources.get("GPU", 0.0) for n in self.nodes] or [0])
        plan = resources.plan_resources(
            total_cpus, node_gpus, self.experiment.num_actors, self.num_replicas, nodes=self.nodes,
            actor_resources=layout.actor_resources, learner_resources=layout.learner_resources,
            actor_cpus=layout.actor_cpus, learner_cpus=layout.learner_cpus,
            num_learner_workers=layout.num_learner_workers)
        self.num_replicas = plan.num_learner_replicas
        if layout.learner_threads is not None:
            plan = dataclasses.replace(plan, learner_threads=tuple(layout.learner_threads))
        self.plan = plan
        colocate = layout.colocate_replay
        self.colocate = self.connection.local if colocate is None else bool(colocate)
        if layout.num_learner_workers > 1:
            self.colocate = False  # A learner group samples over gRPC from one shared server.
        if layout.num_replay_shards > 1:
            self.colocate = False  # Every shard is a server process of its own.
        shards = layout.num_replay_shards
        where = ("inside the learner" if self.colocate else
                 f"in {shards} shard processes" if shards > 1 else "in its own process")
        self.console.message(f"placement: {plan.describe()}; replay {where}")

    def launch(self) -> None:
        """Asks Ray for replay, learner and actors, without waiting for the learner.

        The driver does its own set-up (loggers, run records) while the
        workers start; ``await_ready`` then waits for the learner. A replay
        server of its own is still waited for here: the learner needs its address.
        """
        exp, layout, plan = self.experiment, self.layout, self.plan
        replay_host = "127.0.0.1" if self.connection.local else None
        if not self.colocate:
            self._start_replay(replay_host)

        # Named, so workers that Ray may restart find it by name rather than
        # through a handle argument (see RemoteVariableSource).
        if layout.num_learner_workers > 1:
            self._warn_if_shared("the learner workers' TensorFlow servers (they run any op sent to them)")
            self.learner = self._start_learner_group()
        else:
            learner_env = process.runtime_env("learner", cpu_only=not plan.learner_gpus,
                                              threads=plan.learner_threads[0])
            if layout.debug_eager:  # breakpoint() in the step waits for `ray debug` to attach
                learner_env["env_vars"]["RAY_DEBUG"] = "legacy"
                self._warn_if_shared("--debug-eager's remote debugger (a Python prompt in the learner)")
            self.learner = workers.remote(
                workers.LearnerWorker, num_cpus=plan.learner_cpus, num_gpus=plan.learner_gpus,
                max_concurrency=4, max_restarts=0, name=self.learner_name,
                runtime_env=learner_env,
                **placement.ray_options(plan, "learner"),
            ).remote(exp.builder, self.spec, self.num_replicas, self.replay_address, exp.logdir,
                     num_actors=exp.num_actors, replay_host=replay_host,
                     restore_step=self.restored_step, threads=plan.learner_threads,
                     use_gpus=bool(plan.learner_gpus),
                     replay_checkpoint=layout.replay_checkpoint, debug_eager=layout.debug_eager,
                     weight_publish_period=layout.weight_publish_period,
                     seed=seeding.role_seed(exp.seed, "learner"))

        # Actors start now, so their imports overlap with the learner's build;
        # each asks the learner for the replay address and its first weights,
        # which Ray answers once the learner is up. The evaluator waits for
        # ``launch_evaluator``.
        # max_restarts=0: the driver replaces a failed actor itself (see driver_actors).
        self._actor_cls = workers.remote(
            workers.ActorWorker, num_cpus=plan.actor_cpus, max_restarts=0,
            max_task_retries=0, runtime_env=process.runtime_env("actor"),
            **placement.ray_options(plan, "actor"))
        for i in range(exp.num_actors):
            budget = RestartBudget(layout.actor_max_restarts, layout.actor_restart_window_s)
            self.slots.append(ActorSlot(i, seeding.actor_seed(exp.seed, i), self.spawn_actor(i), budget))

    def launch_evaluator(self) -> Optional[Any]:
        """Starts the evaluator (once); returns the ref of its placement answer, or None.

        The control loop calls it after the learner's first step (or at the
        first evaluation, if sooner): until then the evaluator's start (a
        process, dm_control, its environment, a call to the learner: about
        1.6 CPU-s) would share the CPU with the learner's trace. Started
        before ``report_placement``, it is in that report (None is returned);
        started after, the caller passes the ref to ``record_placement`` once
        it is ready.
        """
        if self.evaluator is not None:
            return None
        exp, layout, plan = self.experiment, self.layout, self.plan
        self.evaluator = workers.remote(
            workers.Evaluator, num_cpus=plan.evaluator_cpus, max_restarts=1, max_task_retries=0,
            runtime_env=process.runtime_env("evaluator"),
        ).remote(exp.builder, exp.environment,
                 seeding.role_seed(exp.seed, "evaluator"), self.learner_name,
                 weights_timeout_s=layout.weights_timeout_s, startup_timeout_s=layout.startup_timeout_s,
                 video=exp.video_every_evals > 0)
        asked = placement.ask_locations([("evaluator", self.evaluator)])
        if self._placement_asked is not None:
            self._placement_asked[0].update(asked)
            return None
        return asked["evaluator"]

    def record_placement(self, name: str, ref: Any) -> None:
        """Adds a worker started after ``report_placement`` (its ``ask_locations`` ref): its line and record."""
        where = placement.collect_locations({name: ref}, self.nodes, self.layout.call_timeout_s,
                                            wait=self.calls.wait)
        self.node_placement = {**(self.node_placement or {}), **where}
        self._publish_placement(where)

    def _publish_placement(self, where: Dict[str, Any]) -> None:
        """Prints ``where``'s lines and records the whole ``node_placement`` in run_info.json."""
        for line in placement.describe(where):
            self.console.message(f"placement: {line}")
        run_dir.update_run_info(self.experiment.logdir, {"node_placement": self.node_placement})

    def await_ready(self) -> Dict[str, Any]:
        """Waits for the learner ``launch`` started; returns its ``ready()`` answer."""
        layout = self.layout
        ready = self.calls.get(self.learner.ready.remote(), layout.startup_timeout_s, "learner start")
        self.replay_address = ready["replay_address"]
        self.learner_workers = int(ready.get("num_workers", 1))
        group = f" in {self.learner_workers} learner workers" if self.learner_workers > 1 else ""
        self.console.message(f"learner up: {ready['num_replicas']} replica(s){group} on "
                             f"{', '.join(ready['devices'])}; step {int(ready['learner_steps']):,}; "
                             f"replay at {self.replay_address}")
        if ready.get("eager"):
            self.console.message("--debug-eager: learner steps run eagerly (slow); a breakpoint() in "
                                 "the step function waits for `ray debug` (run it in another terminal)")
        self.replay_restore = self.replay_restore or ready.get("replay_restore")
        self._ask_placement()
        return ready

    def _warn_if_shared(self, what: str) -> None:
        warning = shared_host.exposure_warning(what)
        if warning:
            self.console.message(warning)

    def _start_replay(self, replay_host: Optional[str]) -> None:
        """The replay server(s) of their own: one, or ``num_replay_shards`` (``rlplat.replay_shards``).

        Each shard's tables are validated for the actors that write to it;
        shard 0 is pinned where a single server would be (the learner's node),
        the others are spread by Ray.
        """
        exp, layout, plan = self.experiment, self.layout, self.plan
        num_shards = layout.num_replay_shards
        for shard in range(num_shards):
            options = placement.ray_options(plan, "replay") if shard == 0 else {"scheduling_strategy": "SPREAD"}
            self.replay_shards.append(workers.remote(
                workers.ReplayServer, num_cpus=plan.replay_cpus, max_restarts=0,
                runtime_env=process.runtime_env("replay"), **options,
            ).remote(exp.builder, self.spec, exp.num_actors // num_shards, replay_host,
                     checkpoint_logdir=exp.logdir if layout.replay_checkpoint else None,
                     restore_step=self.restored_step))
        self.replay = self.replay_shards[0]
        addresses = [self.calls.get(server.address.remote(), layout.startup_timeout_s, "replay server start")
                     for server in self.replay_shards]
        self.replay_address = replay_shards.join_addresses(addresses)
        self.replay_restore = self.calls.get(self.replay.restore_info.remote(), layout.call_timeout_s,
                                             "replay server")

    def spawn_actor(self, index: int, incarnation: int = 0):
        """A new ``ActorWorker`` for actor ``index``; ``incarnation`` > 0 replaces a failed one."""
        exp, layout = self.experiment, self.layout
        return self._actor_cls.remote(exp.builder, exp.environment, index,
                                      seeding.actor_seed(exp.seed, index), self.learner_name, None,
                                      weights_timeout_s=layout.weights_timeout_s,
                                      startup_timeout_s=layout.startup_timeout_s,
                                      incarnation=incarnation,
                                      prefetch_weights=layout.prefetch_weights,
                                      envs_per_actor=layout.envs_per_actor,
                                      shared_weights=layout.shared_weights,
                                      weights_per_node=layout.weights_per_node,
                                      weight_relay=layout.weight_relay)

    def _ask_placement(self) -> None:
        """Asks every worker where it runs, before any has a task (``report_placement`` collects)."""
        members = self._learner_group_members()
        named = [("learner group" if members else "learner", self.learner), ("replay", self.replay)]
        named += [(f"replay shard {i}", handle) for i, handle in enumerate(self.replay_shards[1:], 1)]
        named += [(f"learner worker {i}", handle) for i, handle in enumerate(members)]
        named += [("evaluator", self.evaluator)] + [(f"actor {s.index}", s.handle) for s in self.slots]
        self._placement_asked = (placement.ask_locations(named), len(members))

    def report_placement(self) -> None:
        """Prints the node each worker landed on; records it in run_info.json.

        Call it after ``await_ready``; the driver does once the learner and
        actors have their first tasks, so that the wait for the other workers'
        answers (each one's start) is not on the way to the first step. The
        evaluator, if not yet started, is added later (``record_placement``). With a
        learner group, each learner worker (process) gets its own record and
        line, ``learner worker <i>`` with ``worker_index`` and ``is_chief``;
        ``learner group`` is the coordinating actor.
        """
        if self._placement_asked is None:
            return
        (refs, num_members), self._placement_asked = self._placement_asked, None
        self.node_placement = placement.collect_locations(refs, self.nodes, self.layout.call_timeout_s,
                                                          wait=self.calls.wait)
        for i in range(num_members):
            where = self.node_placement.get(f"learner worker {i}")
            self.node_placement[f"learner worker {i}"] = where and {**where, "worker_index": i,
                                                                     "is_chief": i == 0}
        if self.colocate:
            self.node_placement["replay"] = dict(self.node_placement.get("learner") or {}, colocated=True)
        self._publish_placement(self.node_placement)

    def _start_learner_group(self):
        """``--num-learner-workers W > 1``: a LearnerGroup actor named as the learner.

        The group (no TF, 0 CPUs, pinned next to the chief) starts W learner
        processes and answers the same calls a LearnerWorker does. Each worker
        asks for the plan's per-worker learner CPUs, GPUs and custom resources
        (e.g. ``learner=1``) and, on a cluster, is pinned to the node the plan
        gave it: the chief (worker 0) to the replay server's node.
        """
        from rlplat.distributed import learner_group  # pylint: disable=g-import-not-at-top

        layout, plan = self.layout, self.plan
        num_workers = layout.num_learner_workers
        return workers.remote(
            learner_group.LearnerGroup, num_cpus=0, max_concurrency=8, max_restarts=0,
            name=self.learner_name,
            # Not cpu_only: members inherit these env_vars, and GPU members need CUDA visible.
            runtime_env=process.runtime_env("learner-group", cpu_only=False),
            **placement.ray_options(plan, "learner_group"),
        ).remote(self.experiment.builder, self.spec, num_workers, self.replay_address, self.experiment.logdir,
                 restore_step=self.restored_step, threads=plan.learner_threads,
                 use_gpus=bool(plan.learner_gpus), num_cpus=plan.learner_cpus,
                 num_gpus=plan.learner_gpus,
                 member_options=[placement.ray_options(plan, "learner", i) for i in range(num_workers)],
                 build_timeout_s=layout.startup_timeout_s, call_timeout_s=layout.call_timeout_s,
                 train_timeout_s=layout.learner_stall_timeout_s,
                 collective_timeout_s=layout.learner_stall_timeout_s,
                 name_prefix=self.learner_name, replay_checkpoint=layout.replay_checkpoint)

    def _learner_group_members(self) -> List[Any]:
        """Handles of the learner group's workers, chief first; [] for one learner worker.

        Looked up by name (``learner_group.member_name``); a member that is
        gone maps to None, which the placement report shows as not up.
        """
        if self.learner_workers <= 1:
            return []
        from rlplat.distributed import learner_group  # pylint: disable=g-import-not-at-top

        members = []
        for i in range(self.learner_workers):
            try:
                members.append(ray.get_actor(learner_group.member_name(self.learner_name, i)))
            except ValueError:
                members.append(None)
        return members

    # ----------------------------------------------------------------- end
    def stop_actors(self) -> None:
        """No more data is needed: every actor is ended now."""
        for slot in self.slots:
            kill_worker(slot.handle)
            slot.stopped = True

    def kill_all(self, learner_stopped: bool) -> None:
        """Ends every worker; a stopped learner first removes its shared-memory weights."""
        if self.learner is not None and learner_stopped:
            # Ray ends workers without running their exit hooks: remove the
            # learner's shared-memory weights first (a killed learner's are
            # removed by the next learner on this host).
            try:
                ray.get(self.learner.release_shared_weights.remote(), timeout=2.0)
            except Exception:  # pylint: disable=broad-except  (a learner group has none)
                pass
        if self.learner is not None and self.layout.weight_relay:
            # Detached: a relay outlives the actor that started it, so the run ends its own.
            from rlplat.distributed import weight_relay  # pylint: disable=g-import-not-at-top

            weight_relay.end_relays(self.learner)
        servers = self.replay_shards or [self.replay]
        for handle in [s.handle for s in self.slots] + [self.evaluator, self.learner, *servers]:
            kill_worker(handle)
