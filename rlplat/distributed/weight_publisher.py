"""The learner's published policy: a version at most every ``period`` learner steps, once per node.

Actors act on the newest *published* version, not on whatever the learner
holds at the moment they ask. Publishing is what costs: each version is one
copy into this host's shared memory (``shared_weights``), which the actors on
the learner's node read, and, once a reader on another node has asked, one
``ray.put`` into Ray's object store. A reader on another node then gets an
object reference (a few bytes over Ray) and resolves it with ``ray.get``:
Ray's object manager pulls each object to a node once, and every actor on
that node maps the same copy from the node's store. So a version crosses the
network once per node, not once per actor, and at most once per ``period``
learner steps: a fast (GPU) learner cannot flood the actors' links, and the
policy lag the actors report stays about ``period`` learner steps or less.

Only the newest version's object is kept referenced here; an actor still
acting on an older one keeps that one alive until it adopts the next.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import ray

Weights = Tuple[int, Dict[str, List[np.ndarray]]]


class WeightPublisher:
    """Publishes ``read()``'s policy (``(version, {"policy": arrays})``) every ``period`` learner steps.

    Args:
      read: the learner's newest finite policy weights.
      period: learner steps between two published versions (>= 1).
      shared_memory: also write each version into a shared-memory block for
        actors on this host (``shared_weights.SharedWeightsWriter``).
    """

    def __init__(self, read: Callable[[], Weights], period: int = 1, shared_memory: bool = True):
        if period < 1:
            raise ValueError(f"weight_publish_period must be >= 1 learner step (got {period})")
        self._read, self._period = read, int(period)
        self._want_shared, self._shared = bool(shared_memory), None
        self._lock = threading.Lock()
        self._published: Optional[Weights] = None
        self._ref: Optional[Tuple[int, Any]] = None  # (version, ObjectRef) once another node asked
        self._refs_wanted = False
        self.num_published = 0
        self.num_objects = 0  # versions put into the object store
        self._learner_step = 0
        self._lags: List[int] = []  # learner steps behind, of each reader that asked since counts()

    def maybe_publish(self, learner_step: int) -> None:
        """Publishes when ``period`` learner steps have passed since the last version."""
        self._learner_step = int(learner_step)
        published = self._published
        if published is None or learner_step - published[0] >= self._period:
            self.publish()

    def note_reader(self, held_version: int) -> None:
        """Counts how far behind a reader that asks over Ray is: the learner's step now minus the
        version it holds. Exact, where the driver's count lags by a ``train`` call."""
        if held_version >= 0:
            with self._lock:
                if len(self._lags) < 100_000:
                    self._lags.append(max(0, self._learner_step - int(held_version)))

    def publish(self) -> None:
        """Publishes the learner's current policy now (a no-op for a version already published)."""
        version, weights = self._read()
        if self._published is not None and version == self._published[0]:
            return
        arrays = weights["policy"]
        if self._want_shared:
            self._write_shared(version, arrays)
        ref = ray.put(list(arrays)) if self._refs_wanted else None
        with self._lock:
            self._published = (version, weights)
            if ref is not None:
                self._ref = (version, ref)
                self.num_objects += 1
        self.num_published += 1

    def counts(self) -> Dict[str, Any]:
        """Versions published, objects put for other nodes, the bytes of one version, and
        ``remote_policy_lag``: the median lag of the readers that asked over Ray since the last call
        (absent when none asked)."""
        published = self._published
        nbytes = 0 if published is None else sum(int(np.asarray(a).nbytes) for a in published[1]["policy"])
        with self._lock:
            lags, self._lags = self._lags, []
        out: Dict[str, Any] = {"weight_versions_published": self.num_published,
                               "weight_objects_put": self.num_objects, "weight_version_bytes": nbytes}
        if lags:
            out["remote_policy_lag"] = float(np.median(lags))
        return out

    def latest(self) -> Optional[Weights]:
        """The newest published ``(version, {"policy": arrays})``, or None before the first."""
        return self._published

    def ref_if_newer(self, version: int) -> Optional[Tuple[int, List[Any]]]:
        """``(version, [ObjectRef of the policy arrays])`` when newer than ``version``, else None.

        The reference comes wrapped in a list, so Ray hands it over as a
        reference instead of resolving it into the caller's answer.
        """
        self.note_reader(version)
        with self._lock:
            self._refs_wanted = True
            ref, published = self._ref, self._published
        if published is None or published[0] <= version:
            return None
        if ref is None or ref[0] != published[0]:  # the first ask from another node: put the current one
            new = ray.put(list(published[1]["policy"]))
            with self._lock:
                if self._ref is None or self._ref[0] < published[0]:
                    self._ref = (published[0], new)
                    self.num_objects += 1
                ref = self._ref
        return ref[0], [ref[1]]

    def shared_info(self) -> Dict[str, Any]:
        """Where readers find the policy: this node's Ray id, ``per_node`` (other nodes may ask for
        object references), and the shared-memory block's ``SharedWeightsWriter.info`` when there is one."""
        block = self._shared.info() if self._shared is not None else {}
        return dict(block, node_id=ray.get_runtime_context().get_node_id(), per_node=True)

    def _write_shared(self, version: int, arrays: List[np.ndarray]) -> None:
        if self._shared is None:
            from rlplat.distributed.shared_weights import SharedWeightsWriter  # pylint: disable=g-import-not-at-top

            try:
                self._shared = SharedWeightsWriter(arrays)
            except OSError as e:  # no /dev/shm room: actors on this host pull over Ray instead
                self._want_shared = False
                print(f"rlplat: shared memory: {e.strerror or e}; actors on this host pull weights "
                      "over Ray instead", flush=True)
                return
            atexit.register(self._shared.close)
        self._shared.publish(version, arrays)

    def close(self) -> None:
        """Removes the shared-memory block and drops the object reference."""
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        self._want_shared = False
        with self._lock:
            self._ref = None
