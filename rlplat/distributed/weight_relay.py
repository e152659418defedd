"""A relay per node: one process fetches each published policy version and puts it in the node's shared memory.

The second way for weights to reach a node once (``--weight-relay``; the
first, the default, is an object reference per version, ``weight_publisher``).
The first actor on a node that is not the learner's starts the node's relay
(a named Ray actor pinned to that node, no CPU reserved); every actor on the
node then reads new versions from the relay's shared-memory block exactly as
actors on the learner's host read the learner's: two integer reads per
check, one copy per new version, no Ray call. The relay alone asks the
learner, every ``poll_period_s``, for a version newer than the one it holds,
so the learner answers one small call per node per poll instead of one per
actor per pull, and each version's bytes cross the node's link once.

A relay lives as long as its learner answers: when the learner is gone, the
relay removes its block and exits. The driver also ends every relay of the
run at teardown (``end_relays``), since a relay outlives the actor that
started it.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional

import ray

RELAY_PREFIX = "rlplat_weight_relay"


def relay_name(learner_id: str, node_id: str) -> str:
    """The Ray actor name of the relay of learner ``learner_id`` (its actor id) on node ``node_id``."""
    return f"{RELAY_PREFIX}:{learner_id}:{node_id}"


class WeightRelay:
    """Fetches the learner's policy versions over Ray and writes each into this node's shared memory.

    Args:
      learner: the learner's Ray handle (a ``learner_service.WeightServer``).
      poll_period_s: seconds between two asks for a newer version.
      timeout_s: bound on one ask; a learner silent that long is taken as gone.
    """

    def __init__(self, learner, poll_period_s: float = 0.02, timeout_s: float = 60.0):
        # A plain pull per ask: the answer carries the arrays, and Ray moves them to this node once.
        self._learner, self._timeout_s = learner, float(timeout_s)
        self._poll_period_s = float(poll_period_s)
        self._writer = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.num_versions = 0
        self.error: Optional[str] = None
        self._fetch()  # the first version, so a reader can attach as soon as the relay exists
        self._thread = threading.Thread(target=self._run, name="weight-relay", daemon=True)
        self._thread.start()

    def _fetch(self) -> None:
        from rlplat.distributed.shared_weights import SharedWeightsWriter  # pylint: disable=g-import-not-at-top

        held = self._writer.version if self._writer is not None else -1
        answer = ray.get(self._learner.get_variables_if_newer.remote(["policy"], held), timeout=self._timeout_s)
        if answer is None:
            return
        version, weights = answer
        arrays: List[Any] = list(weights["policy"])
        with self._lock:
            if self._writer is None:
                self._writer = SharedWeightsWriter(arrays)
            self._writer.publish(version, arrays)
            self.num_versions += 1

    def _run(self) -> None:
        while not self._stop.wait(self._poll_period_s):
            try:
                self._fetch()
            except Exception as e:  # pylint: disable=broad-except  (the learner is gone: so is the run)
                self.error = f"{type(e).__name__}: {e}"
                print(f"rlplat: weight relay: {self.error}; removing this node's block and exiting", flush=True)
                self.close()
                os._exit(0)  # exit_actor() only works on an actor method's own thread

    def shared_weights_info(self) -> Optional[Dict[str, Any]]:
        """Where this node's actors read the policy: the block's ``SharedWeightsWriter.info`` and this
        node's Ray id; None when the block could not be made (no /dev/shm room)."""
        with self._lock:
            if self._writer is None:
                return None
            return dict(self._writer.info(), node_id=ray.get_runtime_context().get_node_id(), relay=True)

    def counts(self) -> Dict[str, Any]:
        """Versions relayed so far, the version held, and the last error (None while healthy)."""
        with self._lock:
            held = self._writer.version if self._writer is not None else -1
        return {"versions_relayed": self.num_versions, "version": held, "error": self.error}

    def close(self) -> None:
        """Stops asking and removes the block (readers keep their mapping until they close)."""
        self._stop.set()
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


def relay_for_this_node(learner, timeout_s: float) -> Any:
    """This node's relay for ``learner`` (a Ray actor handle), started here if no actor on the node has yet.

    Named per learner and node, so the actors of one node share one relay
    (``get_if_exists`` makes the start atomic); detached, so it does not end
    with the actor that started it; pinned to this node with no CPU reserved.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=g-import-not-at-top

    node_id = ray.get_runtime_context().get_node_id()
    name = relay_name(learner._actor_id.hex(), node_id)  # pylint: disable=protected-access
    cls = ray.remote(WeightRelay)
    return cls.options(name=name, get_if_exists=True, lifetime="detached", num_cpus=0, max_concurrency=4,
                       max_restarts=0,
                       scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                       ).remote(learner, timeout_s=timeout_s)


def end_relays(learner, timeout_s: float = 5.0) -> List[str]:
    """Ends every relay of ``learner`` (its handle): their blocks first, then the processes.

    Returns the names ended. Best effort: a relay already gone is skipped.
    """
    prefix = f"{RELAY_PREFIX}:{learner._actor_id.hex()}:"  # pylint: disable=protected-access
    ended = []
    for name in ray.util.list_named_actors():
        if not str(name).startswith(prefix):
            continue
        try:
            relay = ray.get_actor(name)
        except ValueError:
            continue
        try:
            ray.get(relay.close.remote(), timeout=timeout_s)
        except Exception:  # pylint: disable=broad-except
            pass
        ray.kill(relay)
        ended.append(name)
    return ended
