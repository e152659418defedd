"""Where a run's workers go (Ray options) and where they went (a report).

``ray_options(plan, role)`` turns a ``resources.ResourcePlan`` into Ray actor
options: actors ask for their custom resources (e.g. ``{"actor": 1}``), so
Ray keeps them on actor nodes; the learner asks for its own (e.g.
``{"learner": 1}``) and, on a multi-node cluster, is pinned together with a
separate replay server to the node the plan chose. Replay starts before the
learner (the learner needs its address), so pinning both to one node, rather
than a resource, is what keeps them together, and the replay server need
not hold a share of ``learner``.

With several learner workers (``--num-learner-workers W``) each worker
asks for the learner's resources and is pinned to the node the plan gave it
(``ray_options(plan, "learner", index)``): the chief to the replay server's
node, so no worker stays pending on a cluster that cannot hold it (the plan
already failed then). The ``LearnerGroup`` actor coordinating them holds no
resources and is pinned next to the chief (role ``"learner_group"``), since
it forwards every weight pull to the chief.

``ask_locations(named_handles)`` asks each live worker for its node, and
``collect_locations`` turns the answers into one record per worker;
``describe`` makes console lines of them. The driver asks before it gives the
workers their first tasks, collects once they run, prints the lines and
stores the records in ``run_info.json``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import ray

from rlplat.distributed import resources


def ray_options(plan: resources.ResourcePlan, role: str, index: int = 0) -> Dict[str, Any]:
    """Extra ``ray.remote(...).options`` for ``role`` ("actor", "learner", "replay", ...).

    ``index`` picks the learner worker (0 is the chief) for role "learner".
    """
    options: Dict[str, Any] = {}
    wanted = {"actor": plan.actor_resources, "learner": plan.learner_resources}.get(role)
    if wanted:
        options["resources"] = dict(wanted)
    node_id = None
    if role == "learner" and plan.learner_worker_nodes:
        if not 0 <= index < len(plan.learner_worker_nodes):
            raise ValueError(f"learner worker {index} is not in the plan of "
                             f"{len(plan.learner_worker_nodes)} worker(s)")
        node_id = plan.learner_worker_nodes[index][0]
    elif role in ("learner", "replay", "learner_group"):
        node_id = plan.learner_node_id
    if node_id:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=g-import-not-at-top

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    return options


def _where_am_i(_worker) -> Dict[str, Any]:
    """Runs inside a worker (through ``__ray_call__``): its node ID, process ID, whether it loaded TensorFlow,
    and the wall-clock time its constructor began (``init_entered``; None for a worker that keeps none)."""
    return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
            "tensorflow": "tensorflow" in sys.modules, "init_entered": getattr(_worker, "init_entered", None)}


def ask_locations(named_handles: Sequence[Tuple[str, Any]]) -> Dict[str, Any]:
    """Asks each worker where it runs; ``{name: ref}`` for ``collect_locations``.

    Each worker runs ``_where_am_i`` through Ray's ``__ray_call__``, after its
    ``__init__``, on the live process. Ray runs an actor's calls in the order
    they were sent, so asking before giving a worker its first task gets the
    answer without waiting for that task.
    """
    return {name: handle.__ray_call__.remote(_where_am_i) for name, handle in named_handles
            if handle is not None}


def collect_locations(refs: Mapping[str, Any], nodes: Sequence[resources.NodeInfo],
                      timeout_s: float, wait: Optional[Callable[..., Any]] = None
                      ) -> Dict[str, Optional[Dict[str, Any]]]:
    """``{name: {"node_id", "node_ip", "custom_resources", "pid", "tensorflow", "init_entered"}}`` for the refs.

    ``refs`` are ``ask_locations``'s. A worker that does not answer within ``timeout_s`` in total, or has
    died, maps to None: the report never holds up or fails a run.
    ``wait(refs, num_returns, timeout_s)`` replaces ``ray.wait`` (the
    driver's waits in slices, to act on signals).
    """
    if wait is None:
        done, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    else:
        done, _ = wait(list(refs.values()), len(refs), timeout_s)
    done = set(done)
    by_id = {n.node_id: n for n in nodes}
    out: Dict[str, Optional[Dict[str, Any]]] = {}
    for name, ref in refs.items():
        where = None
        if ref in done:
            try:
                where = ray.get(ref, timeout=1.0)
            except ray.exceptions.RayError:
                where = None
        node = by_id.get(where["node_id"]) if where else None
        out[name] = None if where is None else {
            **where, "node_ip": node.ip if node else None,
            "custom_resources": node.custom_resources() if node else {}}
    return out


def describe(placement: Mapping[str, Optional[Mapping[str, Any]]]) -> List[str]:
    """One line per node: ``learner, replay on 10.0.0.1 (node 1a2b3c4d, learner=1)``.

    A learner worker of a group (a record with ``worker_index``) gets a line
    of its own, ``learner worker 0 (chief) on ...``, so each one's node shows.
    """
    lines: List[Tuple[str, List[str]]] = []  # (where, names), in first-seen order
    shared: Dict[str, List[str]] = {}
    for name, where in placement.items():
        if where is None:
            key = "no node yet (not up or failed; see the worker logs)"
        else:
            extra = "".join(f", {k}={v:g}" for k, v in sorted(where.get("custom_resources", {}).items()))
            key = f"{where.get('node_ip')} (node {str(where.get('node_id'))[:8]}{extra})"
        if where is not None and "worker_index" in where:
            lines.append((key, [f"{name} (chief)" if where.get("is_chief") else name]))
        elif key in shared:
            shared[key].append(name)
        else:
            shared[key] = [name]
            lines.append((key, shared[key]))
    return [f"{', '.join(names)} on {key}" for key, names in lines]


