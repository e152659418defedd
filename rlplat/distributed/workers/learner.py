"""The learner worker: a Replicator over this node's devices, the builder's learner, checkpoints.

It also hosts replay when co-located, publishes the policy into shared
memory for actors on its host, and serves weights to the others
(``learner_service.LearnerService`` is its face).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from rlplat import core
from rlplat import run_dir
from rlplat.distributed import process
from rlplat.distributed import startup_times
from rlplat.distributed.learner_service import LearnerService
from rlplat.distributed.weight_publisher import WeightPublisher
from rlplat.distributed.workers import common
from rlplat.distributed.workers.replay import start_reverb
from rlplat.distributed.workers.common import UNBOUND_ADDER, UNBOUND_SOURCE


class LearnerWorker(LearnerService):
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
                 debug_eager: bool = False, weight_publish_period: int = 1, seed: Optional[int] = None):
        if tf_config is not None:
            if replay_address is None:
                raise ValueError("a learner worker of a multi-worker group cannot host replay; "
                                 "start a separate ReplayServer (colocate_replay=False)")
            # Read when the strategy is built (below): it must be set first.
            os.environ["TF_CONFIG"] = json.dumps(tf_config)
            num_replicas = 1  # MWMS takes each worker's GPUs (or its CPU) itself.
        # Wall-clock times of this worker's own start-up steps (``ready()``): where the seconds before
        # the replay server and the learner are ready go.
        self.init_entered = time.time()  # wall clock, in the placement record too (``placement._where_am_i``)
        self._startup_times = {"process_started": startup_times.process_launch_time(),
                               "init_entered": self.init_entered}
        # CPU seconds behind each step, for the bench's floor of this path (bench/startup.py): the main
        # thread's until the constructor (Ray's worker start), then the constructor's and the trace's.
        self._startup_cpu = {"boot": time.clock_gettime(time.pthread_getcpuclockid(threading.main_thread().ident))}
        init_cpu = time.thread_time()
        self._tf_config = tf_config
        self._builder, self._environment_spec = builder, environment_spec
        process.setup_worker(threads[0], threads[1], hide_gpus=not use_gpus,
                             num_cpu_replicas=None if use_gpus else num_replicas)
        from rlplat import replication  # pylint: disable=g-import-not-at-top
        from rlplat.utils import checkpointing  # pylint: disable=g-import-not-at-top

        self._startup_times["tensorflow_imported"] = time.time()
        self._startup_cpu["tensorflow_import"] = time.thread_time() - init_cpu

        self._server = None
        self._logdir, self._replay_checkpoint = logdir, bool(replay_checkpoint)
        self._replay_restore: Optional[Dict[str, Any]] = None
        if replay_address is None:
            self._server, port, self._replay_restore = start_reverb(
                builder, environment_spec, num_actors, logdir if replay_checkpoint else None,
                restore_step)
            # The learner samples through 127.0.0.1, which Reverb recognises as
            # its own process (no gRPC); actors get an address they can reach.
            learner_address = f"127.0.0.1:{port}"
            self._replay_address = f"{replay_host or common.node_ip()}:{port}"
        else:
            learner_address = self._replay_address = replay_address
        self._learner_address = learner_address
        self._replay_ready_time = time.time()  # wall clock: the driver's start-up times span processes
        self._first_step_time: Optional[float] = None

        self._replicator = replication.make_replicator(
            num_replicas=None if tf_config is not None else num_replicas,
            collective_timeout_s=collective_timeout_s if tf_config is not None else None,
            eager=debug_eager)
        # The driver writes every role's logs (one place, even across nodes),
        # so the learner gets no logdir of its own.
        if seed is not None:  # the run's --seed fixes the initial weights (a restore overwrites them)
            import tensorflow as tf  # pylint: disable=g-import-not-at-top

            tf.keras.utils.set_random_seed(int(seed))
        self._learner = builder.make_learner(environment_spec, self._replicator, learner_address,
                                             logdir=None)
        self._startup_times["learner_built"] = time.time()
        self._checkpointer = checkpointing.Checkpointer(
            run_dir.checkpoints_dir(logdir), is_chief=self._replicator.is_chief,
            max_to_keep=max_checkpoints_to_keep, **self._learner.checkpointables())
        self._restored_step = None if restore_step is None else self._checkpointer.restore(restore_step)
        self._finite_weights: Dict[Tuple[str, ...], Tuple[int, Dict[str, List[np.ndarray]]]] = {}
        self._step_lock = threading.Lock()   # a step and a checkpoint never overlap
        self._train_lock = threading.Lock()  # one train() at a time
        self._stop = threading.Event()
        # Inserts the first step waited for show whether a resumed learner had
        # to refill replay (see ``train``); counted from here, as a restored
        # server's insert count starts at the checkpoint's.
        self._inserts_at_start = self._replay_inserts()
        self._first_step_inserts: Optional[int] = None
        # Actors act on published versions: in shared memory for this node, one object per version
        # for each other node (``weight_publisher``). A learner group serves its chief's over Ray only.
        self._publisher: Optional[WeightPublisher] = None
        if self._replicator.is_chief and tf_config is None:
            self._publisher = WeightPublisher(lambda: self.get_variables(["policy"]), weight_publish_period)
            self._publisher.publish()
        self._startup_times["init_done"] = time.time()
        self._startup_cpu["build"] = time.thread_time() - init_cpu - self._startup_cpu["tensorflow_import"]
        # The first step's trace needs no data: it runs now, beside the driver's placement
        # report and the actors' start, instead of after the first train() call. That call
        # waits for it on the step lock and, if it failed, traces again and raises there.
        threading.Thread(target=self._trace_first_step, name="trace-first-step", daemon=True).start()

    def _trace_first_step(self) -> None:
        with self._step_lock:
            trace_cpu = time.thread_time()
            try:
                self._learner.trace()
            except Exception:  # pylint: disable=broad-except
                return
            self._startup_times["first_step_traced"] = time.time()
            self._startup_cpu["first_step_trace"] = time.thread_time() - trace_cpu

    def ready(self) -> Dict[str, Any]:
        """What the driver needs once the learner is up."""
        return {"replay_address": self._replay_address, "learner_steps": self._learner.num_steps,
                "restored_step": self._restored_step, "num_replicas": self._replicator.num_replicas,
                "devices": self._devices(),
                "pid": os.getpid(), "node_ip": common.node_ip(), "replay_colocated": self._server is not None,
                "replay_ready_time": self._replay_ready_time,
                "startup_times": dict(self._startup_times, replay_ready=self._replay_ready_time),
                "startup_cpu_s": dict(self._startup_cpu),
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
                if self._first_step_time is None:
                    self._first_step_time = time.time()
                if self._publisher is not None:
                    self._publisher.maybe_publish(self._learner.num_steps)
                input_wait += float(metrics.get("input_wait_s", 0.0))
                first = self._first_step_inserts is None and self._inserts_at_start is not None
                if first:
                    now = self._replay_inserts()
                    self._first_step_inserts = -1 if now is None else now - self._inserts_at_start
            seconds = time.perf_counter() - start
            steps = self._learner.num_steps - start_steps
            out = {k: float(v) for k, v in common.to_python(dict(metrics)).items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
            out.update({"learner_steps": self._learner.num_steps, "steps": steps,
                        "seconds": seconds, "steps_per_second": steps / max(seconds, 1e-9),
                        "tf_traces": common.trace_count(),
                        # Starved (near 1: actors or replay set the pace) or compute-bound (near 0).
                        "learner_input_wait_fraction": min(1.0, input_wait / max(seconds, 1e-9))})
            out.pop("input_wait_s", None)
            if self._publisher is not None:
                out.update(self._publisher.counts())
            if first_call and self._first_step_inserts is not None:
                out["replay_inserts_before_first_step"] = self._first_step_inserts
            if first_call and self._first_step_time is not None:
                out["first_step_time"] = self._first_step_time  # wall clock, for the start-up times
                if "first_step_traced" in self._startup_times:
                    out["first_step_traced_time"] = self._startup_times["first_step_traced"]
                    out["first_step_trace_cpu_s"] = self._startup_cpu["first_step_trace"]
            return out

    def make_unbound_actor(self, actor_index: int, seed: int, evaluation: bool = False):
        """The builder's actor for another process, with no variable source (and no adder) yet.

        Built here because this process has TensorFlow and the agent's
        networks, which an actor's NumPy policy is derived from; the acting
        process (an ``ActorWorker``, the ``Evaluator``) binds its own source
        (``WeightPuller.bind_source``) and adder (``bind_adder``) and so never
        imports TensorFlow. None when the builder's actor cannot be rebound
        (not a ``core.WeightPuller``; an acting one must be a
        ``core.PullingActor``): the acting process then builds its own.
        """
        adder = None if evaluation else UNBOUND_ADDER
        actor = self._builder.make_actor(self._environment_spec, UNBOUND_SOURCE, adder, int(actor_index),
                                         int(seed), evaluation=bool(evaluation))
        rebindable = isinstance(actor, core.PullingActor if not evaluation else core.WeightPuller)
        return actor if rebindable else None

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
        """(version, weights) if newer than ``version``, else None: the policy's newest published
        version (``weight_publisher``), other variables' newest finite one."""
        published = None
        if self._publisher is not None and list(names) == ["policy"]:
            self._publisher.note_reader(version)
            published = self._publisher.latest()
        current, weights = published if published is not None else self.get_variables(names)
        return None if current <= version else (current, weights)

    def policy_ref_if_newer(self, version: int):
        """``(version, [ObjectRef])`` of the newest published policy if newer than ``version``, else None
        (``WeightPublisher.ref_if_newer``): for actors on other nodes."""
        if self._publisher is None:
            raise RuntimeError("this learner publishes no policy (a learner group member); pull it instead")
        return self._publisher.ref_if_newer(version)

    def shared_weights_info(self) -> Optional[Dict[str, Any]]:
        """Where actors read the published policy (``WeightPublisher.shared_info``); None: pull over Ray."""
        return None if self._publisher is None else self._publisher.shared_info()

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
        if self._publisher is not None:
            self._publisher.close()

    def stop_replay(self) -> None:
        """Stops a co-located Reverb server (actors' writers then fail fast)."""
        self.release_shared_weights()
        if self._server is not None:
            self._server.stop()
            self._server = None
