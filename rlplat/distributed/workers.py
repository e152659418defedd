"""The workers of a distributed run, as plain classes Ray turns into actors.

Each class is ordinary Python (so it can be built and tested in one process);
``remote(cls, **options)`` makes the Ray actor class. Workers receive
FACTORIES (the builder, an environment name) and addresses, never live
objects: everything that holds a thread, a socket or a TF variable is made
inside the worker's own process.

Import discipline: this module must not import TensorFlow, Reverb or
dm_control at the top. A worker's ``__init__`` sizes TF's thread pools and
hides GPUs (``process.setup_worker``) before anything builds TF state; heavy
modules are imported after that.

Ray calls are for control only: an ``ActorWorker`` runs a whole chunk of
environment steps per call, a ``LearnerWorker`` a chunk of learner steps.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import threading
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import ray

from rlplat import core
from rlplat import replay_shards
from rlplat import run_dir
from rlplat.distributed import process
from rlplat.distributed import seeding
from rlplat.distributed.variables import RemoteVariableSource



def remote(cls, **options):
    """The Ray actor class of ``cls`` with ``options`` (num_cpus, max_restarts, ...).

    Task events are off unless asked for: every weight pull and chunk is a
    Ray task, and the GCS keeps an event record of each (up to 100,000 by
    default), which grew the GCS by about 9 MiB a minute in a D4PG run
    (``bench/soak.py``). rlplat's own logs and ``rlplat status`` carry what
    those events would show.
    """
    options.setdefault("enable_task_events", False)
    if "scheduling_strategy" not in options and ray.util.get_current_placement_group() is not None:
        # Started from inside a placement group (a sweep's Tune trial): the
        # run's workers take their own CPUs from the cluster, not the trial's.
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # pylint: disable=g-import-not-at-top

        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=None)
    return ray.remote(cls).options(**options)


def node_ip() -> str:
    """This process's node IP as Ray sees it (127.0.0.1 on a local instance)."""
    return ray.util.get_node_ip_address()


def _start_reverb(builder, environment_spec, num_actors: int,
                  checkpoint_logdir: Optional[str] = None, restore_step: Optional[int] = None):
    """Starts a Reverb server with the builder's tables; returns (server, port, restore).

    With ``checkpoint_logdir`` the server can write replay checkpoints there
    and, given ``restore_step`` (the learner step being resumed), first loads
    the one of that step (or the newest before it). ``restore`` is None without
    ``checkpoint_logdir``, else ``{"replay_restored_from": path or None,
    "replay_restored_items": items loaded}``; it is read before any client can
    know the address, so no actor has inserted yet. It also holds the
    restored rate limiters' ``replay_restored_inserts`` and
    ``replay_restored_samples``, from which the ratio goes on.

    Reverb 0.14 has no bind-address option: the server listens on all
    interfaces ([::]:port) even when only local clients use it. On a shared
    network, firewall the port range or run on a private network; Ray's own
    servers, by contrast, are bound to loopback for local runs.
    """
    from rlplat.replay import checkpoints  # pylint: disable=g-import-not-at-top
    from rlplat.replay import server as replay_server  # pylint: disable=g-import-not-at-top

    tables = builder.make_replay_tables(environment_spec, num_actors)
    if checkpoint_logdir is None:
        server = replay_server.make_server(tables)
        return server, server.port, None
    found = checkpoints.candidates(checkpoint_logdir, restore_step) if restore_step is not None else []
    skipped = []
    for path in found + [None]:  # newest first, then empty replay
        try:
            server = replay_server.make_server(
                tables, checkpointer=checkpoints.make_checkpointer(checkpoint_logdir, path))
        except Exception as e:  # pylint: disable=broad-except  (Reverb raises plain RuntimeErrors)
            if path is None:
                raise
            skipped.append(f"{os.path.basename(path)} ({str(e).splitlines()[0][:120]})")
            tables = builder.make_replay_tables(environment_spec, num_actors)
            continue
        break
    stats = checkpoints.table_stats(f"127.0.0.1:{server.port}")
    return server, server.port, {"replay_restored_from": path, "replay_restored_items": stats["items"],
                                 "replay_restored_inserts": stats["inserts"],
                                 "replay_restored_samples": stats["samples"],
                                 "replay_skipped": skipped}


def _make_environment(env_name: str, env_kwargs: Optional[Dict[str, Any]], seed: int):
    from rlplat_envs import make_environment  # pylint: disable=g-import-not-at-top  (loads dm_control)

    return make_environment(env_name, seed=seed, **dict(env_kwargs or {}))


def _make_loop(environment, actor):
    from rlplat.environment_loop import EnvironmentLoop  # pylint: disable=g-import-not-at-top

    return EnvironmentLoop(environment, actor)


def _was_restarted() -> bool:
    """True in a Ray actor that Ray restarted after a failure (False outside Ray)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Ray 2.60 calls its own deprecated actor_id inside
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # pylint: disable=broad-except  (not inside a Ray actor)
        return False


def _trace_count() -> int:
    """Replicated-step traces in this process so far (rising in a steady run = retracing)."""
    from rlplat.replication import replicator  # pylint: disable=g-import-not-at-top

    return replicator.trace_count()


def _to_python(value: Any) -> Any:
    """Stats as plain Python (floats, ints, lists): cheap to pickle, easy to log."""
    if isinstance(value, dict):
        return {k: _to_python(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_python(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size != 1 else value.reshape(()).item()
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "numpy"):  # a TF tensor
        return _to_python(value.numpy())
    return value


# --------------------------------------------------------------------- replay
class ReplayServer:
    """Hosts a ``reverb.Server`` with the builder's tables (when not co-located).

    Args:
      builder: the agent's ``AgentBuilder`` (its tables, validated for
        ``num_actors``).
      environment_spec: the ``EnvironmentSpec`` the tables' signatures use.
      num_actors: actors that will insert.
      host: the address clients should use; None means this node's IP
        (127.0.0.1 on a local instance).
      checkpoint_logdir: the run directory when replay is checkpointed
        (``--replay-checkpoint``); the learner's chief triggers each save.
      restore_step: with ``checkpoint_logdir``: the learner step being
        resumed; its replay checkpoint is loaded before the server starts.
    """

    def __init__(self, builder, environment_spec, num_actors: int, host: Optional[str] = None,
                 checkpoint_logdir: Optional[str] = None, restore_step: Optional[int] = None):
        process.setup_worker(1, 1, hide_gpus=True)
        self._server, port, self._restore = _start_reverb(builder, environment_spec, num_actors,
                                                          checkpoint_logdir, restore_step)
        self._address = f"{host or node_ip()}:{port}"

    def address(self) -> str:
        """``host:port`` for actors and the learner."""
        return self._address

    def restore_info(self) -> Optional[Dict[str, Any]]:
        """What the server loaded at start (see ``_start_reverb``); None: not checkpointed."""
        return self._restore

    def ping(self) -> bool:
        return True

    def stop(self) -> None:
        self._server.stop()


# ---------------------------------------------------------------------- actor
class ActorWorker:
    """One actor: an environment, the builder's actor, and an adder to replay.

    Args:
      builder: the agent's ``AgentBuilder``.
      env_name, env_kwargs: ``envs.make_environment(env_name, seed=..., **env_kwargs)``.
      actor_index: this actor's index (the builder may vary exploration by it).
      seed: this actor's seed (``seeding.actor_seed(global_seed, actor_index)``);
        it seeds the environment and the builder's actor.
      variable_source: the learner's Ray actor name (or handle), pulled
        through ``RemoteVariableSource`` with timeouts.
      replay_address: ``host:port`` of the Reverb server (with replay shards,
        all of them joined by commas: this actor writes to its own), or None to ask the
        learner (which knows it, also when it hosts the server itself). Asking
        lets the driver start actors while the learner is still building, so
        their imports overlap with its start-up.
      weights_timeout_s: bound on each weight pull.
      startup_timeout_s: bound on the first call to the learner (the address,
        or the first pull), which waits while the learner is being built.
      prefetch_weights: pull without waiting (``RemoteVariableSource``'s
        ``prefetch``); the first pull always waits.
      incarnation: 0 for the first actor of this index; the driver passes
        1, 2, ... to the actors that replace a failed one.
      shared_weights: read new policy versions from the learner's shared
        memory when on its host (``RemoteVariableSource(shared=...)``).
      envs_per_actor: K environments stepped side by side with one policy
        call per step (``rlplat.vector_loop``). Environment j has its own
        actor object (exploration index ``actor_index * K + j``, seed
        ``seeding.actor_seed(seed, j)`` for j > 0) and its own adder stream;
        the first pulls the weights for all. A builder with a
        ``make_vector_actor`` gives one actor for all K instead, which acts
        and records the same while batching the per-environment work.

    Weights are pulled in ``__init__`` (``actor.update(wait=True)``), so no
    step is ever taken with random or stale-from-before-restore weights.
    """

    def __init__(self, builder, env_name: str, env_kwargs: Optional[Dict[str, Any]],
                 actor_index: int, seed: int, variable_source, replay_address: Optional[str],
                 weights_timeout_s: float = 60.0, startup_timeout_s: float = 300.0,
                 incarnation: int = 0, prefetch_weights: bool = False, envs_per_actor: int = 1,
                 shared_weights: bool = True):
        started = time.perf_counter()
        process.setup_worker(1, 1, hide_gpus=True)
        from rlplat import specs  # pylint: disable=g-import-not-at-top

        self._index = int(actor_index)
        self._restarted = incarnation > 0 or _was_restarted()
        # A replacement (or a process Ray restarted) gets the same arguments as
        # the first; a fresh seed keeps it from replaying the first one's episodes.
        self._seed = seeding.restart_seed(seed, os.getpid()) if self._restarted else int(seed)
        k = int(envs_per_actor)
        seeds = [self._seed] + [seeding.actor_seed(self._seed, j) for j in range(1, k)]
        self._environments = [_make_environment(env_name, env_kwargs, s) for s in seeds]
        spec = specs.make_environment_spec(self._environments[0])
        self._source = RemoteVariableSource(variable_source, timeout_s=weights_timeout_s,
                                            first_timeout_s=startup_timeout_s,
                                            prefetch=prefetch_weights, shared=shared_weights)
        if replay_address is None:
            replay_address = self._source.call("replay_address")
        # With replay shards every actor writes to one of them.
        replay_address = replay_shards.address_for_actor(replay_address, self._index)
        # An agent's own actor for K environments batches their per-environment
        # work; without one, K actors (and adders) are driven side by side.
        vector = (builder.make_vector_actor(spec, self._source, replay_address, seeds,
                                            actor_indices=[self._index * k + j for j in range(k)])
                  if k > 1 else None)
        if vector is not None:
            self._adders, actors = [vector], vector  # closing it closes its adder
            self._actor = vector
        else:
            self._adders = [builder.make_adder(replay_address, spec) for _ in seeds]
            actors = [builder.make_actor(spec, self._source, adder, self._index * k + j, s)
                      for j, (adder, s) in enumerate(zip(self._adders, seeds))]
            self._actor = actors[0]
        self._actor.update(wait=True)
        if k == 1:
            self._loop = _make_loop(self._environments[0], self._actor)
        else:
            from rlplat.vector_loop import VectorEnvironmentLoop  # pylint: disable=g-import-not-at-top

            self._loop = VectorEnvironmentLoop(self._environments, actors)
        self._total_steps = 0
        # How long a (re)start takes in here: TF set-up, environment, the learner's weights.
        self._init_s = time.perf_counter() - started

    def info(self) -> Dict[str, Any]:
        """Identity of this worker (for tests and the run log)."""
        return {"actor_index": self._index, "seed": self._seed, "pid": os.getpid(),
                "node_ip": node_ip(), "policy_version": self._actor.policy_version,
                "restarted": self._restarted, "init_s": self._init_s}

    def run_steps(self, num_steps: int) -> Dict[str, Any]:
        """Runs ``num_steps`` environment steps; returns the loop's stats plus ours.

        Added keys: ``actor_index``, ``seed``, ``env_steps``, ``seconds``,
        ``steps_per_second``, ``policy_version`` (of the weights at the end of
        the chunk), ``weight_pulls`` (pulls that moved weights, in total),
        ``restarted``, ``pid`` and ``init_s`` (seconds ``__init__`` took).
        """
        start = time.perf_counter()
        stats = _to_python(dict(self._loop.run_steps(int(num_steps)) or {}))
        seconds = time.perf_counter() - start
        self._total_steps += int(num_steps)
        stats.update({
            "actor_index": self._index, "seed": self._seed, "env_steps": int(num_steps),
            "seconds": seconds, "steps_per_second": num_steps / max(seconds, 1e-9),
            "policy_version": int(self._actor.policy_version),
            "weight_pulls": self._source.num_pulls, "restarted": self._restarted,
            "shared_weight_reads": self._source.num_shared_reads,
            "pid": os.getpid(), "init_s": self._init_s,
        })
        return stats

    def close(self) -> None:
        """Flushes the adder and frees the environment (best effort)."""
        for thing in self._adders + self._environments:
            try:
                thing.close()
            except Exception:  # pylint: disable=broad-except
                pass


# -------------------------------------------------------------------- learner
class LearnerWorker:
    """The learner: a Replicator over this node's devices, the builder's learner.

    Args:
      builder: the agent's ``AgentBuilder``.
      environment_spec: the ``EnvironmentSpec``.
      num_replicas: replicas (GPUs when ``use_gpus``, else logical CPUs).
      replay_address: ``host:port`` of a separate Reverb server, or None to
        host the server HERE (co-located replay: the learner then samples
        through Reverb's in-process path, without gRPC).
      logdir: the run directory (checkpoints go to ``<logdir>/checkpoints``).
      num_actors: inserting actors (sizes the tables when co-located).
      replay_host: the address actors use for a co-located server; None means
        this node's IP.
      restore_step: the learner step whose checkpoint ``__init__`` restores
        (``rlplat.run_dir.start_step`` chose it); None for a new run.
      threads: TF (intra_op, inter_op) threads.
      use_gpus: replicate over the GPUs Ray gave this worker.
      max_checkpoints_to_keep: checkpoints kept on disk.
      tf_config: this worker's ``TF_CONFIG`` (a dict) when it is one of several
        learner workers under MultiWorkerMirroredStrategy (see
        ``learner_group.LearnerGroup``, which starts them). It is set in this
        process before the strategy exists; ``num_replicas`` is then ignored
        (each worker replicates over all of its GPUs, or its one CPU), replay
        cannot be co-located, and only the chief (worker 0) keeps checkpoint
        files although every worker saves.
      collective_timeout_s: with ``tf_config``: a cross-worker collective that
        waits longer than this fails instead of hanging on a dead peer.
      replay_checkpoint: save replay with every checkpoint (the chief asks the
        server, co-located or not, for a Reverb checkpoint and files it under
        the learner step, see ``replay.checkpoints``); a co-located server
        also restores the one of the step resumed.
      debug_eager: run each learner step eagerly (one replica), as Python, so
        a ``breakpoint()`` in the step function stops there (``--debug-eager``).

    Threading: create it as a threaded Ray actor (``max_concurrency`` >= 3).
    ``train`` runs on one Ray thread while ``get_variables*`` (actors' pulls),
    ``save_checkpoint`` and ``request_stop`` are answered on others. Weights
    are read without waiting for the step, because a step blocked on replay
    (waiting for inserts) must never block the actors that would unblock it;
    a checkpoint does wait for the step (``_step_lock``), so it is consistent.
    """

    def __init__(self, builder, environment_spec, num_replicas: int, replay_address: Optional[str],
                 logdir: str, *, num_actors: int = 1, replay_host: Optional[str] = None,
                 restore_step: Optional[int] = None, threads: Tuple[int, int] = (1, 2),
                 use_gpus: bool = False,
                 max_checkpoints_to_keep: int = 3, tf_config: Optional[Dict[str, Any]] = None,
                 collective_timeout_s: Optional[float] = None, replay_checkpoint: bool = False,
                 debug_eager: bool = False):
        if tf_config is not None:
            if replay_address is None:
                raise ValueError("a learner worker of a multi-worker group cannot host replay; "
                                 "start a separate ReplayServer (colocate_replay=False)")
            # Read when the strategy is built (below): it must be set first.
            os.environ["TF_CONFIG"] = json.dumps(tf_config)
            num_replicas = 1  # MWMS takes each worker's GPUs (or its CPU) itself.
        self._tf_config = tf_config
        self._builder, self._environment_spec = builder, environment_spec
        process.setup_worker(threads[0], threads[1], hide_gpus=not use_gpus,
                             num_cpu_replicas=None if use_gpus else num_replicas)
        from rlplat import replication  # pylint: disable=g-import-not-at-top
        from rlplat.utils import checkpointing  # pylint: disable=g-import-not-at-top

        self._server = None
        self._logdir, self._replay_checkpoint = logdir, bool(replay_checkpoint)
        self._replay_restore: Optional[Dict[str, Any]] = None
        if replay_address is None:
            self._server, port, self._replay_restore = _start_reverb(
                builder, environment_spec, num_actors, logdir if replay_checkpoint else None,
                restore_step)
            # The learner samples through 127.0.0.1, which Reverb recognises as
            # its own process (no gRPC); actors get an address they can reach.
            learner_address = f"127.0.0.1:{port}"
            self._replay_address = f"{replay_host or node_ip()}:{port}"
        else:
            learner_address = self._replay_address = replay_address
        self._learner_address = learner_address

        self._replicator = replication.make_replicator(
            num_replicas=None if tf_config is not None else num_replicas,
            collective_timeout_s=collective_timeout_s if tf_config is not None else None,
            eager=debug_eager)
        # The driver writes every role's logs (one place, even across nodes),
        # so the learner gets no logdir of its own.
        self._learner = builder.make_learner(environment_spec, self._replicator, learner_address,
                                             logdir=None)
        self._checkpointer = checkpointing.Checkpointer(
            run_dir.checkpoints_dir(logdir), is_chief=self._replicator.is_chief,
            max_to_keep=max_checkpoints_to_keep, **self._learner.checkpointables())
        self._restored_step = None if restore_step is None else self._checkpointer.restore(restore_step)
        self._finite_weights: Dict[Tuple[str, ...], Tuple[int, Dict[str, List[np.ndarray]]]] = {}
        self._shared_failed = False
        self._step_lock = threading.Lock()   # a step and a checkpoint never overlap
        self._train_lock = threading.Lock()  # one train() at a time
        self._stop = threading.Event()
        # Inserts the first step waited for show whether a resumed learner had
        # to refill replay (see ``train``); counted from here, as a restored
        # server's insert count starts at the checkpoint's.
        self._inserts_at_start = self._replay_inserts()
        self._first_step_inserts: Optional[int] = None
        # Actors on this host read new policy versions from shared memory
        # instead of asking over Ray (``shared_weights``); the chief publishes.
        self._shared = None
        if self._replicator.is_chief and tf_config is None:  # a learner group serves over Ray only
            self._publish_weights()

    def ready(self) -> Dict[str, Any]:
        """What the driver needs once the learner is up."""
        return {"replay_address": self._replay_address, "learner_steps": self._learner.num_steps,
                "restored_step": self._restored_step, "num_replicas": self._replicator.num_replicas,
                "devices": self._devices(),
                "pid": os.getpid(), "node_ip": node_ip(), "replay_colocated": self._server is not None,
                "is_chief": self._replicator.is_chief, "num_workers": self._replicator.num_workers,
                "worker_index": int(self._tf_config["task"]["index"]) if self._tf_config else 0,
                "eager": self._replicator.eager,
                "replay_restore": self._replay_restore}

    def replay_counts(self, timeout_s: float) -> Optional[List[Dict[str, int]]]:
        """Each replay server's items, inserts and samples (``replay.errors.shard_counts``).

        The driver asks here instead of probing Reverb itself, which would
        import Reverb and with it TensorFlow into the driver.
        """
        from rlplat.replay import errors as replay_errors  # pylint: disable=g-import-not-at-top

        return replay_errors.shard_counts(self._learner_address, timeout_s)

    def _replay_inserts(self) -> Optional[int]:
        """Completed inserts of every table (None if the server did not answer)."""
        counts = self.replay_counts(10.0)
        return None if counts is None else sum(shard["replay_inserts"] for shard in counts)

    def _devices(self) -> List[str]:
        try:
            return list(self._replicator.strategy.extended.worker_devices)
        except RuntimeError:  # TF's default strategy (one replica) has no device list
            import tensorflow as tf  # pylint: disable=g-import-not-at-top

            return ["/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"]

    def replay_address(self) -> str:
        return self._replay_address

    def train(self, num_steps: int) -> Dict[str, Any]:
        """Runs about ``num_steps`` learner steps; returns metrics of the last one.

        Stops early (between steps) after ``request_stop``. The builder's
        learner may take several steps per ``step()`` call, so the count can
        overshoot by less than one call. Returned keys: the learner's metrics
        plus ``learner_steps``, ``steps`` (taken in this call), ``seconds``,
        ``steps_per_second`` and ``learner_input_wait_fraction`` (of
        ``seconds`` spent waiting for batches: the learner's bottleneck
        timing); the call that takes this worker's first step adds
        ``replay_inserts_before_first_step`` (inserts since the worker was built:
        at least the warm-up on an empty replay, about none on a restored one).
        """
        with self._train_lock:
            first_call = self._first_step_inserts is None
            start_steps = self._learner.num_steps
            start = time.perf_counter()
            metrics: Dict[str, Any] = {}
            input_wait = 0.0
            while not self._stop.is_set() and self._learner.num_steps - start_steps < num_steps:
                with self._step_lock:
                    metrics = self._learner.step()
                if self._shared is not None:
                    self._publish_weights()
                input_wait += float(metrics.get("input_wait_s", 0.0))
                first = self._first_step_inserts is None and self._inserts_at_start is not None
                if first:
                    now = self._replay_inserts()
                    self._first_step_inserts = -1 if now is None else now - self._inserts_at_start
            seconds = time.perf_counter() - start
            steps = self._learner.num_steps - start_steps
            out = {k: float(v) for k, v in _to_python(dict(metrics)).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
            out.update({"learner_steps": self._learner.num_steps, "steps": steps,
                        "seconds": seconds, "steps_per_second": steps / max(seconds, 1e-9),
                        "tf_traces": _trace_count(),
                        # Starved (near 1: actors or replay set the pace) or compute-bound (near 0).
                        "learner_input_wait_fraction": min(1.0, input_wait / max(seconds, 1e-9))})
            out.pop("input_wait_s", None)
            if first_call and self._first_step_inserts is not None:
                out["replay_inserts_before_first_step"] = self._first_step_inserts
            return out

    def make_evaluation_actor(self, seed: int):
        """The builder's greedy actor for an ``Evaluator``, with no variable source yet.

        Built here because this process has TensorFlow and the agent's
        networks, which an actor's NumPy policy is derived from; the
        evaluator binds it to its own source (``WeightPuller.bind_source``)
        and so never imports TensorFlow. None when the builder's actor is
        not a ``core.WeightPuller`` (it cannot be rebound; the evaluator
        builds its own).
        """
        actor = self._builder.make_actor(self._environment_spec, UNBOUND_SOURCE, None, 0, int(seed),
                                         evaluation=True)
        return actor if isinstance(actor, core.WeightPuller) else None

    def request_stop(self) -> None:
        """Makes the running (and every later) ``train`` return after its current step."""
        self._stop.set()

    def get_variables(self, names: Sequence[str]) -> Tuple[int, Dict[str, List[np.ndarray]]]:
        """``core.VariableSource.get_variables`` of the learner: its newest finite weights.

        Weights that hold NaN or Inf are never served (the NaN guard stops
        the run a step later; until then actors keep the last finite version).
        """
        current, weights = self._learner.get_variables(list(names))
        key = tuple(names)
        if all(np.all(np.isfinite(a)) for arrays in weights.values() for a in arrays):
            self._finite_weights[key] = (current, weights)
            return current, weights
        if key not in self._finite_weights:
            raise FloatingPointError(f"the policy's weights hold NaN/Inf at learner step {current} and no "
                                     "finite version was served yet; lower the learning rates")
        return self._finite_weights[key]

    def get_variables_if_newer(self, names: Sequence[str], version: int):
        """(version, weights) if the learner's newest finite version is newer than ``version``, else None."""
        current, weights = self.get_variables(names)
        return None if current <= version else (current, weights)

    def shared_weights_info(self) -> Optional[Dict[str, Any]]:
        """Where this host's actors read the policy weights (``SharedWeightsReader.attach``); None: pull over Ray."""
        return None if self._shared is None else self._shared.info()

    def _publish_weights(self) -> None:
        """Writes the current policy version into shared memory (creating the block the first time)."""
        version, weights = self.get_variables(["policy"])
        arrays = weights["policy"]
        if self._shared is None:
            if self._shared_failed:
                return
            from rlplat.distributed.shared_weights import SharedWeightsWriter  # pylint: disable=g-import-not-at-top

            try:
                self._shared = SharedWeightsWriter(arrays)
            except OSError as e:  # no /dev/shm room: actors pull over Ray as before
                self._shared_failed = True
                print(f"rlplat: shared memory: {e.strerror or e}; actors on this host pull weights "
                      "over Ray instead",
                      flush=True)
                return
            atexit.register(self._shared.close)
        self._shared.publish(version, arrays)

    def save_checkpoint(self, timeout_s: float = 60.0) -> Dict[str, Any]:
        """Saves a checkpoint between two steps; returns ``{"path", "step"}``.

        With ``replay_checkpoint`` the chief also saves replay, still between
        the same two steps, and adds ``replay_path`` and ``replay_items``, or
        ``replay_error`` (one line): a failed replay save leaves the learner
        checkpoint valid, and a resume then falls back to an older replay one.

        Raises:
          TimeoutError: a step did not finish within ``timeout_s``.
        """
        if not self._step_lock.acquire(timeout=timeout_s):
            raise TimeoutError(f"learner step did not finish within {timeout_s:g}s; checkpoint skipped")
        try:
            step = self._learner.num_steps
            path = self._checkpointer.save(step)
            out: Dict[str, Any] = {"path": path, "step": step}
            if self._replay_checkpoint and self._replicator.is_chief:
                out.update(self._save_replay(step))
        finally:
            self._step_lock.release()
        return out

    def _save_replay(self, step: int) -> Dict[str, Any]:
        from rlplat.distributed import errors  # pylint: disable=g-import-not-at-top
        from rlplat.replay import checkpoints  # pylint: disable=g-import-not-at-top

        try:
            return checkpoints.save(self._learner_address, self._logdir, step,
                                    self._checkpointer.kept_steps)
        except Exception as e:  # pylint: disable=broad-except
            return {"replay_error": errors.one_line(e)}

    def release_shared_weights(self) -> None:
        """Removes the shared-memory weights (the driver calls it before ending this worker)."""
        if self._shared is not None:
            self._shared.close()
            self._shared = None

    def stop_replay(self) -> None:
        """Stops a co-located Reverb server (actors' writers then fail fast)."""
        self.release_shared_weights()
        if self._server is not None:
            self._server.stop()
            self._server = None


# ------------------------------------------------------------------ evaluator
class _UnboundSource:
    """The variable source of an actor built for another process; it must be bound there."""

    def get_variables(self, names):
        raise RuntimeError("this actor was built for another process: call bind_source() first")


UNBOUND_SOURCE = _UnboundSource()


class Evaluator:
    """Runs the greedy policy (no exploration, no replay) for whole episodes.

    Args:
      builder, env_name, env_kwargs: as for ``ActorWorker``.
      seed: the evaluator's seed (``seeding.role_seed(seed, "evaluator")``).
      variable_source: the learner's Ray actor name (or handle).
      weights_timeout_s, startup_timeout_s: as for ``ActorWorker``.
    """

    # Video of an evaluation episode (``evaluate(video=True)``): an MP4 for
    # the logdir and a smaller GIF that TensorBoard plays in its Images tab.
    VIDEO_SIZE = (240, 320)
    VIDEO_FPS = 30.0
    TENSORBOARD_GIF_SHRINK = 2

    def __init__(self, builder, env_name: str, env_kwargs: Optional[Dict[str, Any]], seed: int,
                 variable_source, weights_timeout_s: float = 60.0, startup_timeout_s: float = 300.0,
                 video: bool = False):
        process.setup_light_worker()  # TensorFlow only if the actor needs it (below)
        from rlplat import specs  # pylint: disable=g-import-not-at-top

        self._environment = _make_environment(env_name, env_kwargs, int(seed))
        self._frames: List[np.ndarray] = []
        self._recorder = None
        if video:
            from rlplat.utils import video as video_lib  # pylint: disable=g-import-not-at-top

            repeat = int(dict(env_kwargs or {}).get("action_repeat", 1))
            self._control_fps = 1.0 / (float(self._environment.control_timestep()) * repeat)
            self._stride = video_lib.frame_stride(self._control_fps, self.VIDEO_FPS)
            self._recorder = video_lib.FrameRecorder(self._environment, self._frames.append,
                                                     *self.VIDEO_SIZE, every=self._stride)
            self._recorder.recording = False
            self._environment = self._recorder
        spec = specs.make_environment_spec(self._environment)
        self._source = RemoteVariableSource(variable_source, timeout_s=weights_timeout_s,
                                            first_timeout_s=startup_timeout_s)
        # The learner builds the greedy actor, so this process needs no
        # TensorFlow (one import fewer per run, and less memory); an actor
        # that cannot be rebound is built here instead.
        actor = self._source.call("make_evaluation_actor", int(seed))
        if actor is not None:
            actor.bind_source(self._source)
        else:
            process.setup_worker(1, 1, hide_gpus=True)
            actor = builder.make_actor(spec, self._source, None, 0, int(seed), evaluation=True)
        self._actor = actor
        self._loop = _make_loop(self._environment, self._actor)

    def evaluate(self, num_episodes: int, video: bool = False) -> Dict[str, Any]:
        """Pulls the newest weights, runs ``num_episodes``; returns mean return and version.

        With ``video`` (and an evaluator built with ``video=True``) the first
        episode is rendered, and ``"video"`` holds ``{"mp4": bytes, "gif":
        bytes, "frames", "height", "width", "fps"}``: bytes, because on a
        cluster this process may not see the driver's logdir.
        """
        self._actor.update(wait=True)
        version = int(self._actor.policy_version)
        start = time.perf_counter()
        returns, steps = [], 0
        record = bool(video) and self._recorder is not None
        for i in range(int(num_episodes)):
            if record:
                self._recorder.recording = i == 0
            stats = _to_python(dict(self._loop.run_episode() or {}))
            returns.append(float(stats.get("episode_return", math.nan)))
            steps += int(stats.get("episode_length", stats.get("steps", 0)) or 0)
        out = {"eval_return": float(np.mean(returns)), "eval_return_std": float(np.std(returns)),
               "eval_episodes": len(returns), "eval_steps": steps, "policy_version": version,
               "eval_seconds": time.perf_counter() - start}
        if record:
            self._recorder.recording = False
            out["video"] = self._encode_video()
        return out

    def _encode_video(self) -> Dict[str, Any]:
        from rlplat.utils import video as video_lib  # pylint: disable=g-import-not-at-top

        frames, self._frames[:] = list(self._frames), []
        fps = self._control_fps / self._stride
        k = self.TENSORBOARD_GIF_SHRINK
        return {"mp4": video_lib.encode(frames, ".mp4", fps),
                "gif": video_lib.encode([f[::k, ::k] for f in frames], ".gif", fps),
                "frames": len(frames), "height": self.VIDEO_SIZE[0], "width": self.VIDEO_SIZE[1],
                "fps": fps}
