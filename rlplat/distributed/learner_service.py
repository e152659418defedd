"""The learner's face to the rest of a run: what actors, the evaluator and the driver call.

``WeightServer`` is what actors see: the replay address and versioned
weights. ``LearnerService`` adds what the driver and the evaluator call.
``LearnerWorker`` (one process) and ``LearnerGroup`` (several under
MultiWorkerMirroredStrategy) implement ``LearnerService``; a bench's stand-in
learner implements ``WeightServer``. All declare it as a base class. Callers hold a Ray handle
and call ``handle.<method>.remote(...)`` by attribute, never by a string
name, so a renamed method fails type-checking (``pyproject.toml``'s mypy
files) and ``tests/distributed/test_learner_service.py``, not a run.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np

# (version, {name: arrays}): what a weight pull returns.
Weights = Tuple[int, Dict[str, List[np.ndarray]]]


@runtime_checkable
class WeightServer(Protocol):
    """What an actor calls: where replay is, and the policy's weights."""

    def replay_address(self) -> str:
        """``host:port`` of the replay server(s) actors write to."""

    def get_variables(self, names: Sequence[str]) -> Weights:
        """The newest finite version of the named variables."""

    def get_variables_if_newer(self, names: Sequence[str], version: int) -> Optional[Weights]:
        """As ``get_variables``, or None when nothing is newer than ``version``."""

    def shared_weights_info(self) -> Optional[Dict[str, Any]]:
        """Where actors read the published policy: the learner's node id, its shared-memory block
        for actors on that node, ``per_node`` references for the others; None: pull over Ray."""


@runtime_checkable
class LearnerService(WeightServer, Protocol):
    """Every call a learner answers over Ray."""

    def policy_ref_if_newer(self, version: int) -> Optional[Tuple[int, List[Any]]]:
        """``(version, [ObjectRef of the policy arrays])`` if a newer version is published, else None:
        what actors on other nodes pull (``rlplat.distributed.weight_publisher``)."""

    def ready(self) -> Dict[str, Any]:
        """What the driver needs once the learner is up: replay address, step, devices, ..."""

    def replay_counts(self, timeout_s: float) -> Optional[List[Dict[str, int]]]:
        """Each replay server's items, inserts and samples; None if one did not answer."""

    def train(self, num_steps: int) -> Dict[str, Any]:
        """About ``num_steps`` learner steps; the metrics of the last one and the counts."""

    def request_stop(self) -> None:
        """The running and every later ``train`` returns after its current step."""

    def make_unbound_actor(self, actor_index: int, seed: int, evaluation: bool = False) -> Any:
        """The builder's actor, unbound (the acting process binds its own source and adder); or None."""

    def save_checkpoint(self, timeout_s: float = 60.0) -> Dict[str, Any]:
        """A checkpoint between two steps: ``{"path", "step"}`` and replay's outcome."""

    def release_shared_weights(self) -> None:
        """Removes the shared-memory weights before the worker is ended."""

    def stop_replay(self) -> None:
        """Stops a co-located replay server."""
