"""The knobs of a Ray run's layout: where roles go, how often they report and
pull, and how faults are handled (not the agent's, nor the experiment's
schedule, which ``rlplat.experiment.Experiment`` holds).

Ray-free, so a command line is checked before any Ray process starts; the
driver and ``rlplat.runners.run_on_ray`` both read it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class RayLayoutConfig:
    """Knobs of the distributed layout (not of the agent).

    Attributes:
      actor_chunk_steps: environment steps per ``ActorWorker.run_steps`` call.
      learner_chunk_steps: learner steps per ``LearnerWorker.train`` call.
      console_every_s: seconds between status lines / learner log records.
      console: print the live status line.
      address: None (a local Ray instance), "auto" or "HOST:PORT" (``cluster.connect``).
      num_learner_replicas: learner replicas: GPUs of the learner's node, or
        logical CPUs; None means every GPU of the node with the most, or 1.
      colocate_replay: host Reverb inside the learner process (in-process
        sampling, no gRPC on the learner's side); None means yes on a local
        Ray instance and no on a cluster.
      learner_threads: TF (intra_op, inter_op) threads of the learner; None
        takes them from the resource plan.
      actor_max_restarts: restarts of one actor allowed within any
        ``actor_restart_window_s``; one more is a crash loop and the actor is
        given up (the run fails when every actor is). 0: never restart.
      actor_restart_window_s: the window of ``actor_max_restarts``: in a long
        run, restarts further apart than this never add up.
      call_timeout_s: bound on control calls (ready, checkpoint, results).
      startup_timeout_s: bound on the learner coming up (imports, build).
      learner_stall_timeout_s: a train chunk running longer means a stuck learner.
      actor_stall_timeout_s: an actor chunk running longer is killed and restarted.
      stop_timeout_s: bound on the learner reaching a step boundary at the end.
      weights_timeout_s: bound on one weight pull by an actor.
      envs_per_actor: environments each actor process steps side by side,
        with one policy call for all of them (``rlplat.vector_loop``); the
        run has ``num_actors * envs_per_actor`` exploration streams.
      shared_weights: actors on the learner's host read new policy versions
        from shared memory (``rlplat.distributed.shared_weights``) instead
        of a Ray round trip per pull; False pulls over Ray only.
      prefetch_weights: actors send their next weight pull and act on with
        the weights they hold until it arrives, instead of waiting for it
        (``RemoteVariableSource(prefetch=True)``); the weights acted with are
        then one pull period older. Off by default: on 2 cores, where the
        learner sets the pace, it did not change env steps/s
        (``bench/d4pg_pull_rate.py``), and the learning results were
        measured with the waiting pull.
      weights_per_node: actors on a node other than the learner's get each
        published policy version as an object reference, so Ray moves it to
        the node once and its actors share that copy
        (``rlplat.distributed.weight_publisher``); False: each actor pulls
        every version over Ray (``--weights-per-actor``, for comparison).
      weight_relay: with ``weights_per_node``, the copy per node goes through a
        relay process on each actor node (``rlplat.distributed.weight_relay``,
        ``--weight-relay``) into that node's shared memory, instead of an
        object reference per version that each actor resolves: the learner
        answers one call per node per poll, not one per actor per pull.
      weight_publish_period: learner steps between two published policy
        versions (``--weight-publish-period``): what actors act on, and how
        often weights cross the network. 1 keeps the actors' lag at about
        one learner step, at which every learning result here was measured;
        larger bounds a fast learner's traffic (``bench/scaling.py``).
      log_to_driver: forward worker stdout/stderr to the console.
      num_learner_workers: learner PROCESSES (``--num-learner-workers``). 1 is
        one ``LearnerWorker``. W > 1 starts a ``learner_group.LearnerGroup`` of
        W workers under MultiWorkerMirroredStrategy; on a cluster they spread
        over the learner nodes, the chief on the replay server's node, and
        share a node only when it offers several ``learner`` units (e.g.
        ``learner=2``; see ``resources.plan_resources``). Each worker
        samples global_batch_size / W transitions per step from Reverb,
        weights stay identical, only worker 0 keeps checkpoints. Each worker
        replicates over all of its GPUs (or its CPU), so W > 1 excludes
        ``num_learner_replicas`` > 1, and replay runs in its own process.
      actor_resources: custom Ray resources each actor asks for, e.g.
        ``{"actor": 1}``; None: ``{"actor": 1}`` when some node offers
        ``actor``, else none; ``{}``: none (see ``resources.plan_resources``).
      learner_resources: custom resources of the learner (a separate replay
        server is pinned to the learner's node); None: ``{"learner": 1}`` when
        some node offers ``learner``, else none; ``{}``: none.
      allow_unauthenticated_ray: join a cluster (``address``) even if it does
        not require Ray token authentication; refused otherwise.
      actor_cpus: CPUs per actor; None: the resource plan's split.
      learner_cpus: CPUs per learner worker (each of the W with
        ``num_learner_workers`` > 1); None: the resource plan's choice.
      num_replay_shards: Reverb servers (``--num-replay-shards``), each in its
        own process with the builder's tables; actor i writes to shard
        ``i % S``, and every learner batch takes an equal share from each
        (``rlplat.replay_shards``), so each shard's rate limiter holds the
        samples-per-insert and the run's holds with them. S > 1 needs a
        number of actors divisible by S, replay out of the learner process,
        and no ``replay_checkpoint``. Shard 0 sits on the learner's node, the
        others are spread over the cluster by Ray.
      replay_checkpoint: save replay (Reverb's tables: items, and each rate
        limiter's counts and settings) with every learner checkpoint, into
        ``<logdir>/replay_checkpoints/ckpt-<step>`` (``replay.checkpoints``), and
        on resume load the one of the restored step before any actor inserts,
        so learning goes on without refilling the warm-up. Without it a resumed
        run starts with an empty replay.
      debug_eager: the learner runs each step eagerly on one replica, through
        the same ``step_fn`` (``replication.make_replicator(eager=True)``),
        so a ``breakpoint()`` in it stops there: its worker gets
        ``RAY_DEBUG=legacy``, and ``ray debug`` attaches a terminal to it.
        Slow; for development only. Needs one learner worker and one replica.
    """

    actor_chunk_steps: int = 1000
    learner_chunk_steps: int = 64
    console_every_s: float = 5.0
    console: bool = True
    address: Optional[str] = None
    num_learner_replicas: Optional[int] = None
    colocate_replay: Optional[bool] = None
    learner_threads: Optional[Tuple[int, int]] = None
    actor_max_restarts: int = 5
    actor_restart_window_s: float = 600.0
    call_timeout_s: float = 60.0
    startup_timeout_s: float = 300.0
    learner_stall_timeout_s: float = 600.0
    actor_stall_timeout_s: float = 600.0
    stop_timeout_s: float = 120.0
    weights_timeout_s: float = 60.0
    prefetch_weights: bool = False
    log_to_driver: bool = False
    num_learner_workers: int = 1
    actor_resources: Optional[Mapping[str, float]] = None
    learner_resources: Optional[Mapping[str, float]] = None
    actor_cpus: Optional[float] = None
    learner_cpus: Optional[float] = None
    allow_unauthenticated_ray: bool = False
    replay_checkpoint: bool = False
    num_replay_shards: int = 1
    debug_eager: bool = False
    envs_per_actor: int = 1
    shared_weights: bool = True
    weights_per_node: bool = True
    weight_relay: bool = False
    weight_publish_period: int = 1

    def __post_init__(self):
        self._check_placement()
        for name in ("actor_chunk_steps", "learner_chunk_steps", "num_learner_workers", "envs_per_actor",
                     "num_replay_shards", "weight_publish_period"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.actor_max_restarts < 0:
            raise ValueError(f"actor_max_restarts must be >= 0 (got {self.actor_max_restarts})")
        if self.num_learner_replicas is not None and self.num_learner_replicas < 1:
            raise ValueError(f"num_learner_replicas must be >= 1 (got {self.num_learner_replicas})")
        if self.num_learner_workers > 1 and self.num_learner_replicas not in (None, 1):
            raise ValueError(f"num_learner_replicas {self.num_learner_replicas} cannot be combined with "
                             f"num_learner_workers {self.num_learner_workers}: each learner worker uses "
                             "all of its node's GPUs (or its CPU); drop num_learner_replicas")
        if self.debug_eager and (self.num_learner_workers > 1 or (self.num_learner_replicas or 1) > 1):
            raise ValueError("debug_eager runs the learner on one device: drop num_learner_replicas "
                             "and num_learner_workers")
        self._check_address()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_s") and value is not None and not value > 0:
                raise ValueError(f"{f.name} must be > 0 (got {getattr(self, f.name)})")
        if self.num_replay_shards > 1 and (self.colocate_replay or self.replay_checkpoint):
            field = "colocate_replay" if self.colocate_replay else "replay_checkpoint"
            raise ValueError(f"num_replay_shards {self.num_replay_shards} runs each shard in its own process "
                             f"and does not checkpoint replay yet: drop {field} or use one shard")
        if self.weight_relay and not self.weights_per_node:
            raise ValueError("weight_relay sends one copy of the weights per node, but the actors are set to "
                             "pull one each (per-actor weights): drop one of the two")
        if self.num_learner_workers > 1 and self.colocate_replay:
            raise ValueError(f"num_learner_workers {self.num_learner_workers} needs replay in its own "
                             "process: drop colocate_replay or use one learner worker")

    def _check_address(self) -> None:
        host, sep, port = (self.address or "").rpartition(":")
        if self.address not in (None, "auto") and not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"address must be 'auto' or HOST:PORT (got {self.address!r}); e.g. "
                             "address 127.0.0.1:6379")
        if self.allow_unauthenticated_ray and self.address is None:
            raise ValueError("allow_unauthenticated_ray only applies with address (a local run always uses "
                             "token authentication); drop it")


    def _check_placement(self) -> None:
        from rlplat.distributed import resources  # pylint: disable=g-import-not-at-top  (no Ray)

        for name in ("actor_resources", "learner_resources"):
            if getattr(self, name) is not None:  # validated, and a plain dict from here on
                object.__setattr__(self, name, resources.check_custom_resources(name, getattr(self, name)))
        for name in ("actor_cpus", "learner_cpus"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"{name} must be > 0 (got {value})")
