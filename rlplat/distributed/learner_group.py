"""Several learner processes as one learner: MultiWorkerMirroredStrategy over Ray.

``LearnerGroup`` starts W ``GroupLearnerWorker`` Ray actors (``--num-learner-workers W``)
and presents them as ONE learner with the ``LearnerWorker`` interface
(``ready``, ``train``, ``request_stop``, ``get_variables_if_newer``,
``save_checkpoint``, ``replay_address``), so the driver and the actors need
not know how many processes learn.

Start-up, in two phases because each worker's ``TF_CONFIG`` must name every
worker's address before ANY of them builds its strategy:

1. W members are created; each picks a free port on its own node (its
   ``__init__`` imports no TensorFlow) and reports ``node_ip:port``.
2. The group writes one ``TF_CONFIG`` per member (worker 0 is the chief) and
   calls ``build`` on all of them at once. ``build`` sets ``TF_CONFIG`` in the
   member's process, then runs ``LearnerWorker.__init__``, which creates the
   strategy (variable creation is a collective: all W build together).

Batches: the learner's batch size stays GLOBAL. Each worker builds its own
Reverb dataset (``distribute_datasets_from_function`` calls the input_fn once
per worker) and samples ``global_batch_size / W`` transitions per step
(``input_context.get_per_replica_batch_size``), so W workers together take
one global batch per step, as one learner would.

Lockstep: every step is a synchronous all-reduce, so all members must take
the same number of steps. Hence:

- ``train(n)`` sends ``train(n)`` to every member and waits for all; members
  count steps identically (same start step, same ``steps_per_call`` cuts).
- ``request_stop`` is NOT forwarded: a member that stopped one step before
  the others would leave them waiting in a collective. The group stops at
  the end of the current ``train`` call (at most one driver chunk later).
- ``save_checkpoint`` waits for the current ``train`` call to end, then every
  member saves (saving may read variables through collectives); only the
  chief keeps the file (``utils.checkpointing``).

Failure: if a member dies or raises, the others would wait in a collective
for it; the group kills every member and raises ``LearnerGroupError`` at
once, without waiting for them. ``collective_timeout_s`` (TF's collective
timeout) bounds a collective that a slow or lost peer never joins, so even a
member nobody watches cannot hang forever.

Weights: actors pull through the group (it is the named learner actor); the
group forwards each pull to the chief, whose weights equal every member's.

Network: each member's TensorFlow gRPC server listens on its port on all
interfaces (TF has no bind-address option). A local run keeps it on loopback
(the ``loopback`` shim); on a cluster, firewall the port range, as for Reverb.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import ray

from rlplat.distributed import errors
from rlplat.distributed import process
from rlplat.distributed import workers
from rlplat.distributed.learner_service import LearnerService

# gRPC honours proxy variables even for cluster-internal addresses.
_NO_PROXY_VARS = ("no_grpc_proxy", "no_proxy", "NO_PROXY")


class LearnerGroupError(RuntimeError):
    """A member of the learner group failed; the message is one line."""


def _free_port() -> int:
    # Released before TF binds it; the gap is a few seconds (as portpicker does).
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def member_name(name_prefix: str, index: int) -> str:
    """Ray actor name of member ``index`` of a group started with ``name_prefix``."""
    return f"{name_prefix}-{index}"


def make_tf_configs(addresses: Sequence[str]) -> List[Dict[str, Any]]:
    """One ``TF_CONFIG`` per worker address: all are "worker"s, worker 0 the chief."""
    cluster = {"worker": list(addresses)}
    return [{"cluster": cluster, "task": {"type": "worker", "index": i}} for i in range(len(addresses))]


class GroupLearnerWorker(workers.LearnerWorker):
    """A ``LearnerWorker`` built in two phases (see the module docstring).

    ``__init__`` only picks this node's port; ``build`` runs the
    ``LearnerWorker`` constructor with ``TF_CONFIG`` set. No other method may
    be called before ``build`` returns (the group guarantees it).
    """

    def __init__(self):  # pylint: disable=super-init-not-called  (build() calls it)
        self._address = f"{workers.node_ip()}:{_free_port()}"

    def address(self) -> str:
        """``host:port`` this worker's TF server will listen on."""
        return self._address

    def build(self, tf_config: Dict[str, Any], *args, **kwargs) -> Dict[str, Any]:
        """Sets ``TF_CONFIG`` and builds the learner; returns ``ready()``."""
        hosts = ",".join(sorted({a.rsplit(":", 1)[0] for a in tf_config["cluster"]["worker"]}))
        for name in _NO_PROXY_VARS:
            current = os.environ.get(name)
            os.environ[name] = f"{current},{hosts}" if current else hosts
        workers.LearnerWorker.__init__(self, *args, tf_config=tf_config, **kwargs)
        return self.ready()

    def state(self) -> Tuple[int, Dict[str, List[np.ndarray]]]:
        """(learner step, every checkpointed variable as NumPy): for tests and checks."""
        out: Dict[str, List[np.ndarray]] = {}
        for name, thing in self._learner.checkpointables().items():
            variables = getattr(thing, "variables", None)
            if variables is None:  # a bare tf.Variable
                out[name] = [np.array(thing.numpy())]
            else:
                out[name] = [np.array(v.numpy()) for v in variables]
        return self._learner.num_steps, out


class LearnerGroup(LearnerService):
    """W learner processes under MultiWorkerMirroredStrategy, seen as one learner.

    Plain Python: use it in the driver process, or make it a threaded Ray
    actor (``workers.remote(LearnerGroup, num_cpus=0, max_concurrency=8)``) so
    its calls return object refs like a ``LearnerWorker``'s. It starts its
    members and waits for them to build in ``__init__``.

    Args:
      builder, environment_spec, logdir, restore_step, threads, use_gpus,
      max_checkpoints_to_keep: as for ``LearnerWorker`` (per member).
      num_workers: W >= 2 learner processes.
      replay_address: ``host:port`` of the (separate) Reverb server.
      num_cpus, num_gpus: Ray resources of EACH member.
      member_options: one mapping of extra Ray options per member, in member
        order (member 0 is the chief): the learner's custom resources and
        the node the resource plan chose for it
        (``placement.ray_options(plan, "learner", index)``); None: none.
      build_timeout_s: bound on the members starting and building.
      call_timeout_s: bound on a checkpoint or a weight pull.
      train_timeout_s: bound on one ``train`` call of all members.
      collective_timeout_s: TF's bound on one cross-worker collective.
      name_prefix: Ray actor names of the members are ``<prefix>-<index>``
        (None: unnamed).
      replay_checkpoint: the chief saves replay with each checkpoint (as
        ``LearnerWorker``; the separate server restores it itself).
    """

    def __init__(self, builder, environment_spec, num_workers: int, replay_address: str, logdir: str,
                 *, restore_step: Optional[int] = None, threads: Tuple[int, int] = (1, 2), use_gpus: bool = False,
                 num_cpus: float = 1.0, num_gpus: float = 0,
                 member_options: Optional[Sequence[Dict[str, Any]]] = None,
                 max_checkpoints_to_keep: int = 3, build_timeout_s: float = 300.0,
                 call_timeout_s: float = 60.0, train_timeout_s: float = 600.0,
                 collective_timeout_s: float = 300.0, name_prefix: Optional[str] = None,
                 replay_checkpoint: bool = False):
        if num_workers < 2:
            raise ValueError(f"a LearnerGroup needs num_workers >= 2 (got {num_workers}); "
                             "use one LearnerWorker for a single learner process")
        if replay_address is None:
            raise ValueError("a LearnerGroup needs a separate replay server (colocate_replay=False)")
        if member_options is not None and len(member_options) != num_workers:
            raise ValueError(f"member_options has {len(member_options)} entries for {num_workers} "
                             "workers; pass one per worker")
        self._call_timeout_s = float(call_timeout_s)
        self._train_timeout_s = float(train_timeout_s)
        self._failed: Optional[str] = None
        self._stop = threading.Event()
        self._train_lock = threading.Lock()  # one train() at a time
        self._round_lock = threading.Lock()  # a checkpoint never overlaps a train round

        options = {"num_cpus": num_cpus, "num_gpus": num_gpus, "max_concurrency": 8,
                   "max_restarts": 0,
                   "runtime_env": process.runtime_env("learner", cpu_only=not num_gpus,
                                                      threads=threads[0])}
        self.members = []
        for index in range(num_workers):
            named = {"name": member_name(name_prefix, index)} if name_prefix else {}
            extra = dict(member_options[index]) if member_options else {}
            self.members.append(workers.remote(GroupLearnerWorker, **options, **extra, **named).remote())
        try:
            deadline = time.monotonic() + build_timeout_s
            addresses = self._all(lambda i, m: m.address.remote(), timeout_s=build_timeout_s, what="start")
            configs = make_tf_configs(addresses)
            kwargs = dict(restore_step=restore_step, threads=tuple(threads), use_gpus=use_gpus,
                          max_checkpoints_to_keep=max_checkpoints_to_keep,
                          collective_timeout_s=collective_timeout_s,
                          replay_checkpoint=replay_checkpoint)
            self._ready = self._all(
                lambda i, m: m.build.remote(configs[i], builder, environment_spec, 1, replay_address,
                                            logdir, **kwargs),
                timeout_s=max(1.0, deadline - time.monotonic()), what="build")
        except BaseException:
            self.shutdown()
            raise
        self.addresses = addresses

    # ------------------------------------------------------------ members
    def _all(self, send: Callable[[int, Any], Any], *, timeout_s: float, what: str) -> List[Any]:
        """``send(index, member)`` (a ``.remote`` call) to every member; the results in member order.

        The first failure kills every member and raises ``LearnerGroupError``
        without waiting for the rest (they may be stuck in a collective).
        """
        if self._failed:
            raise LearnerGroupError(self._failed)
        refs = [send(i, m) for i, m in enumerate(self.members)]
        index_of = {ref: i for i, ref in enumerate(refs)}
        results: List[Any] = [None] * len(refs)
        waiting = list(refs)
        deadline = time.monotonic() + timeout_s
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1,
                                      timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                late = ", ".join(str(index_of[r]) for r in waiting)
                self._fail(f"learner group {what}: worker(s) {late} of {len(refs)} did not answer "
                           f"within {timeout_s:g}s")
            for ref in ready:
                try:
                    results[index_of[ref]] = ray.get(ref, timeout=self._call_timeout_s)
                except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as e:
                    self._fail(f"learner group {what}: worker {index_of[ref]} of {len(refs)} failed "
                               f"({errors.one_line(e)}); the others cannot step without it")
        return results

    def _fail(self, message: str) -> None:
        self._failed = message
        self.shutdown()
        raise LearnerGroupError(message)

    def shutdown(self) -> None:
        """Kills every member (a group cannot go on with a member missing)."""
        for member in getattr(self, "members", []):
            try:
                ray.kill(member, no_restart=True)
            except Exception:  # pylint: disable=broad-except
                pass

    # ------------------------------------------------- LearnerWorker interface
    def ready(self) -> Dict[str, Any]:
        """The chief's ``ready()``, with every member's devices and the worker count."""
        chief = dict(self._ready[0])
        chief["devices"] = [d for r in self._ready for d in r["devices"]]
        chief["num_workers"] = len(self.members)
        chief["workers"] = [{k: r[k] for k in ("worker_index", "is_chief", "pid", "node_ip")}
                            for r in self._ready]
        return chief

    def replay_address(self) -> str:
        return self._ready[0]["replay_address"]

    def train(self, num_steps: int) -> Dict[str, Any]:
        """Every member runs ``train(num_steps)``; returns the chief's metrics.

        Returns at once (``steps`` 0) after ``request_stop``.

        Raises:
          LearnerGroupError: a member failed or the members disagree on the step.
        """
        with self._train_lock:
            if self._stop.is_set():
                return {"learner_steps": self._ready[0]["learner_steps"], "steps": 0,
                        "seconds": 0.0, "steps_per_second": 0.0}
            with self._round_lock:
                results = self._all(lambda i, m: m.train.remote(int(num_steps)),
                                    timeout_s=self._train_timeout_s, what="train")
            steps = {int(r["learner_steps"]) for r in results}
            if len(steps) != 1:
                self._fail(f"learner group members disagree on the step ({sorted(steps)}); "
                           "they must step in lockstep")
            self._ready[0]["learner_steps"] = results[0]["learner_steps"]
            return results[0]

    def request_stop(self) -> None:
        """Makes later ``train`` calls return at once; the current one finishes (lockstep)."""
        self._stop.set()

    def get_variables(self, names: Sequence[str]):
        """The chief's ``get_variables``."""
        return self._chief(lambda m: m.get_variables.remote(list(names)), "get_variables")

    def get_variables_if_newer(self, names: Sequence[str], version: int):
        """The chief's ``get_variables_if_newer`` (every member holds the same weights)."""
        return self._chief(lambda m: m.get_variables_if_newer.remote(list(names), version),
                           "get_variables_if_newer")

    def make_unbound_actor(self, actor_index: int, seed: int, evaluation: bool = False):
        """The chief's ``make_unbound_actor``."""
        return self._chief(lambda m: m.make_unbound_actor.remote(int(actor_index), int(seed), bool(evaluation)),
                           "make_unbound_actor")

    def replay_counts(self, timeout_s: float):
        """The chief's ``replay_counts``."""
        return self._chief(lambda m: m.replay_counts.remote(float(timeout_s)), "replay_counts")

    def policy_ref_if_newer(self, version: int):
        """Not served: a group publishes no per-node policy (``shared_weights_info`` is None)."""
        raise RuntimeError("a learner group serves weights through get_variables_if_newer only")

    def shared_weights_info(self) -> None:
        """None: a group serves weights over Ray only."""
        return None

    def release_shared_weights(self) -> None:
        """Nothing to release: a group publishes no shared-memory weights."""

    def _chief(self, send: Callable[[Any], Any], method: str):
        """The chief's answer to ``send(chief)`` (a ``.remote`` call of ``method``); a failed
        group sends nothing."""
        if self._failed:
            raise LearnerGroupError(self._failed)
        try:
            return ray.get(send(self.members[0]), timeout=self._call_timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise TimeoutError(f"learner group chief did not answer {method} within "
                               f"{self._call_timeout_s:g}s") from e

    def save_checkpoint(self, timeout_s: float = 60.0) -> Dict[str, Any]:
        """Every member saves at the same step; returns the chief's ``{"path", "step"}``.

        Raises:
          TimeoutError: the running ``train`` call did not end within ``timeout_s``.
        """
        if not self._round_lock.acquire(timeout=timeout_s):
            raise TimeoutError(f"learner group train call did not finish within {timeout_s:g}s; "
                               "checkpoint skipped")
        try:
            results = self._all(lambda i, m: m.save_checkpoint.remote(timeout_s),
                                timeout_s=timeout_s + self._call_timeout_s, what="checkpoint")
        finally:
            self._round_lock.release()
        if len({r["step"] for r in results}) != 1 or any(r["path"] for r in results[1:]):
            self._fail(f"learner group checkpoint mismatch: {results}")
        return results[0]

    def member_states(self) -> List[Tuple[int, Dict[str, List[np.ndarray]]]]:
        """Every member's ``state()`` (step and all checkpointed variables)."""
        return self._all(lambda i, m: m.state.remote(), timeout_s=self._call_timeout_s, what="state")

    def stop_replay(self) -> None:
        """Nothing to stop: a group never hosts replay."""
