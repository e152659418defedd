"""A learner's Ray handle, seen by actors as a plain ``core.VariableSource``.

Actors and evaluators are written against ``core.VariableSource``; this
adapter hides Ray from them. Pulls are versioned: the actor sends the version
it already holds and the learner answers None when it has nothing newer, so
an actor polling faster than the learner steps moves no weights at all.
Every wait is bounded (``timeout_s``).

With ``prefetch`` (acting actors), a pull does not wait for the learner: it
adopts the answer to the previous pull if that has arrived, and sends the
next request, so the actor keeps stepping its environment while the learner
serves. The weights it acts with are then one pull period older (at the
default period of 10 actor steps, well under one learner step), and the
round trip leaves the actor's critical path; the first pull, with nothing to
act with yet, still waits.

After the first pull the source asks the learner once where its published
policy lives (``rlplat.distributed.weight_publisher``):

- on the learner's node, it reads new versions from the learner's shared
  memory (``rlplat.distributed.shared_weights``): no round trip at all;
- on another node (``per_node``), it asks for the newest version's object
  reference and fetches that object, so Ray moves each version to the node
  once and every actor there reads that one copy; with ``prefetch`` the
  object, like the answer, arrives while the actor steps on (the actor never
  waits for it, though a link full of weights still delays its inserts:
  bench/results/scaling.md, calibration);
- on another node with ``relay`` (``--weight-relay``), it reads the shared
  memory of that node's relay (``rlplat.distributed.weight_relay``), which
  it starts if no actor there has yet: one process per node fetches each
  version, and the actors make no Ray call at all;
- otherwise (a learner group, ``per_node`` off, a block that cannot be read)
  every pull carries the weights over Ray, as the first one did.
"""

from __future__ import annotations

import time
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import ray

from rlplat import core


class LearnerUnavailableError(RuntimeError):
    """The learner did not serve weights (dead, or busy past the timeout)."""


class RemoteVariableSource(core.VariableSource):
    """``get_variables`` through ``handle.get_variables_if_newer.remote(...)``.

    Args:
      handle: a Ray actor handle of a ``learner_service.WeightServer`` (a
        ``LearnerWorker``, a ``LearnerGroup`` or a bench's stand-in),
        or the learner actor's NAME. Workers that Ray may restart get the name:
        a handle passed as a constructor argument is kept in the object store
        and Ray cannot promise it is still there at restart time.
      timeout_s: bound on one pull.
      first_timeout_s: bound on the first call (default ``timeout_s``); a
        worker started alongside the learner waits for its build here.
      prefetch: answer from the previous pull and send the next one instead
        of waiting (see the module docstring). A request unanswered for
        ``timeout_s`` is then waited for and fails as a blocking pull would.
    """

    def __init__(self, handle, timeout_s: float = 60.0, first_timeout_s: Optional[float] = None,
                 prefetch: bool = False, shared: bool = True, per_node: bool = True, relay: bool = False):
        if isinstance(handle, str):
            handle = ray.get_actor(handle)
        self._handle = handle
        self._timeout_s = float(timeout_s)
        self._first_timeout_s = float(timeout_s if first_timeout_s is None else first_timeout_s)
        self._answered = False
        self._cache: Dict[Tuple[str, ...], Tuple[int, Dict[str, Sequence[np.ndarray]]]] = {}
        self.num_pulls = 0  # Pulls that moved weights (for stats).
        self._prefetch = bool(prefetch)
        # key -> (ref, sent, version): the pull's answer (version None), or, per node, the object of the
        # version it named, on its way to this node.
        self._in_flight: Dict[Tuple[str, ...], Tuple[object, float, Optional[int]]] = {}
        self._want_shared = bool(shared)
        self._shared = None  # SharedWeightsReader once attached
        self._want_per_node = bool(per_node)
        self._want_relay = bool(relay)
        self._asked_where = not (self._want_shared or self._want_per_node)  # _attach asks once
        self._by_reference = False  # pulls answered with an object reference (another node)
        self.num_shared_reads = 0  # pulls answered from shared memory (new versions or not)

    @property
    def reads_shared_memory(self) -> bool:
        return self._shared is not None

    def get_variables(self, names: Sequence[str]) -> Tuple[int, Dict[str, Sequence[np.ndarray]]]:
        key = tuple(names)
        if self._shared is not None and key == ("policy",) and key in self._cache:
            try:
                fresh = self._shared.read_if_newer(self._cache[key][0])
            except TimeoutError:
                fresh = self._wait(self._handle.get_variables_if_newer.remote(list(names), self._cache[key][0]),
                                   "get_variables_if_newer")
            if fresh is not None:
                fresh = (fresh[0], {"policy": fresh[1]})
            self.num_shared_reads += 1
            self._adopt(key, fresh)
            return self._cache[key]
        if not self._asked_where and key == ("policy",) and key in self._cache:
            self._attach()
        if not self._prefetch or key not in self._cache:
            held_version = self._cache[key][0] if key in self._cache else -1
            self._adopt(key, self._resolve(key, self._wait(self._request(key, held_version), self._method(key)),
                                           time.monotonic()))
            return self._cache[key]
        if key in self._in_flight:
            ref, sent, version = self._in_flight[key]
            ready, _ = ray.wait([ref], timeout=0)  # also starts moving the object to this node
            if not ready and time.monotonic() - sent < self._timeout_s:
                return self._cache[key]  # still on its way: act on with what we hold
            del self._in_flight[key]
            answer = self._get(ref, max(0.0, self._timeout_s - (time.monotonic() - sent)), self._method(key))
            if version is not None:  # the version's object has reached this node
                self._adopt(key, (version, {"policy": list(answer)}))
            elif answer is not None and self._by_ref(key):
                # A reference: its object crosses a slow link in the background too, as the answer did.
                version, (obj,) = answer
                self._in_flight[key] = (obj, sent, int(version))
                return self._cache[key]
            else:
                self._adopt(key, answer)
        self._in_flight[key] = (self._request(key, self._cache[key][0]), time.monotonic(), None)
        return self._cache[key]

    def _by_ref(self, key: Tuple[str, ...]) -> bool:
        return self._by_reference and key == ("policy",)

    def _method(self, key: Tuple[str, ...]) -> str:
        return "policy_ref_if_newer" if self._by_ref(key) else "get_variables_if_newer"

    def _request(self, key: Tuple[str, ...], held_version: int):
        """Sends the pull of ``key`` newer than ``held_version``; returns Ray's reference to the answer."""
        if self._by_ref(key):
            return self._handle.policy_ref_if_newer.remote(held_version)
        return self._handle.get_variables_if_newer.remote(list(key), held_version)

    def _resolve(self, key: Tuple[str, ...], answer, sent: float):
        """A pull's answer as ``(version, {name: arrays})`` (or None): an object reference is fetched
        here, from this node's object store once any actor on the node has fetched it."""
        if answer is None or not self._by_ref(key):
            return answer
        version, (ref,) = answer
        arrays = self._get(ref, max(0.0, self._timeout_s - (time.monotonic() - sent)), "policy_ref_if_newer")
        return version, {"policy": list(arrays)}

    def _attach(self) -> None:
        """Asks the learner once where its published policy is: shared memory on its node, or
        object references for other nodes (``rlplat.distributed.weight_publisher``)."""
        from rlplat.distributed.shared_weights import SharedWeightsReader  # pylint: disable=g-import-not-at-top

        self._asked_where = True
        try:
            info = self._wait(self._handle.shared_weights_info.remote(), "shared_weights_info")
        except (AttributeError, LearnerUnavailableError, ray.exceptions.RayError):
            info = None  # a learner without it: keep pulling over Ray
        here = ray.get_runtime_context().get_node_id()
        learner_node = (info or {}).get("node_id")
        if self._want_shared and info and learner_node in (None, here):  # node ids: nodes may share a host name
            self._shared = SharedWeightsReader.attach(info)
        if self._shared is not None or learner_node == here or not self._want_per_node:
            return
        if self._want_relay:
            self._shared = self._attach_relay()
            if self._shared is None:
                print("rlplat: actor: this node has no weight relay it can read; each actor pulls every "
                      "version over Ray", flush=True)
            return
        if info and info.get("per_node"):
            self._by_reference = True
        else:
            print("rlplat: actor: the learner serves no per-node weights (a learner group or an older "
                  "learner); each actor pulls every version over Ray", flush=True)

    def _attach_relay(self):
        """A reader of this node's relay block (the relay started if need be); None when there is none."""
        from rlplat.distributed import weight_relay  # pylint: disable=g-import-not-at-top
        from rlplat.distributed.shared_weights import SharedWeightsReader  # pylint: disable=g-import-not-at-top

        try:
            relay = weight_relay.relay_for_this_node(self._handle, self._timeout_s)
            info = self._wait(relay.shared_weights_info.remote(), "the weight relay's shared_weights_info")
        except (LearnerUnavailableError, ray.exceptions.RayError, ValueError):
            return None
        return SharedWeightsReader.attach(info)

    def _adopt(self, key: Tuple[str, ...], fresh) -> None:
        if fresh is not None:
            self._cache[key] = fresh
            self.num_pulls += 1

    def replay_address(self) -> str:
        """The learner's ``replay_address()``."""
        return self._wait(self._handle.replay_address.remote(), "replay_address")

    def make_unbound_actor(self, actor_index: int, seed: int, evaluation: bool = False):
        """The learner's ``make_unbound_actor(actor_index, seed, evaluation)``."""
        return self._wait(self._handle.make_unbound_actor.remote(int(actor_index), int(seed), bool(evaluation)),
                          "make_unbound_actor")

    def _wait(self, ref, method: str):
        """The answer to ``ref`` (a call of ``method``), waited for at most ``timeout_s``."""
        timeout_s = self._timeout_s if self._answered else self._first_timeout_s
        return self._get(ref, timeout_s, method)

    def _get(self, ref, timeout_s: float, method: str):
        try:
            result = ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise LearnerUnavailableError(
                f"the learner did not answer {method} within {timeout_s:g}s; it is overloaded, "
                "stuck or still starting (see its log in the Ray session's logs/ directory)") from e
        except ray.exceptions.RayActorError as e:
            raise LearnerUnavailableError(
                "the learner is gone (its Ray actor died); the run cannot continue") from e
        self._answered = True
        return result
