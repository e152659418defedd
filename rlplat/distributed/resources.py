"""How much of the cluster each role asks Ray for (no Ray import).

Ray's ``num_cpus`` is a scheduling promise, not a cgroup: it decides how many
workers fit, while the OS shares the cores. The plan follows where the time
goes (``bench/d4pg_throughput.py`` measures each role):

- the learner is the bottleneck at samples_per_insert 32, so it gets whole
  CPUs (1 on a small machine) or GPUs when the cluster has them;
- actors split what is left, fractionally (0.5 each for 2 actors on 2 cores),
  at most one CPU each, since an actor runs one environment on one thread;
- the evaluator and a separate replay server ask for 0 CPUs: the evaluator is
  idle between evaluations, and replay work is charged to the actors that
  insert and the learner that samples. Reserving a CPU for either would leave
  no room for the actors on a 2-core machine.

Placement on a cluster of several nodes (``plan_resources(..., nodes=...)``):

- a node advertising the custom resource ``actor`` is an actor node and one
  advertising ``learner`` a learner node (clusters/*.yaml set them). When the
  cluster has them, each actor asks for ``{"actor": 1}`` and the learner for
  ``{"learner": 1}`` unless told otherwise (``actor_resources`` /
  ``learner_resources``; an empty mapping asks for none). A plain local Ray
  has neither, and nothing changes there;
- the learner's node is chosen here (it must hold the learner's custom
  resources, GPUs and CPUs; the most GPUs wins, then the head) and the
  replay server is pinned to that same node, "next to the learner", so
  sampling never crosses the network. With one node nothing is pinned;
- actors' CPUs are split over the CPUs of the nodes they may run on, so a
  request that Ray could never schedule fails here, at once, naming the flag.

Several learner workers (``num_learner_workers`` W, a MultiWorkerMirrored
learner group): each worker is a learner of its own, asking for the
learner's CPUs, GPUs and custom resources. The plan places all W here: the
chief (worker 0) on the node one learner would get, and the replay server
next to it; the others spread over the learner nodes (fewest workers first,
then the same preference), stacking on one node only when its resources
hold several (e.g. ``learner=2``). If the learner nodes cannot hold W
workers the plan fails at once naming ``num_learner_workers``, rather than
leaving workers pending until the start-up timeout. Without GPUs the
learner's default CPUs (one per replica, at most half the cluster) are
shared by the W workers, so a 2-core machine still has half for the actors.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from rlplat.utils import tf_setup

# Below this an actor would be scheduled but starved; more actors than this
# allows need more CPUs, not smaller slices.
_MIN_ACTOR_CPUS = 0.05

# The custom resources that mark a node's role (see clusters/README.md).
ACTOR_RESOURCE = "actor"
LEARNER_RESOURCE = "learner"
# Ray's predefined resources: these have their own fields (actor_cpus, ...).
_BUILTIN_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """One live Ray node as the planner sees it.

    Attributes:
      node_id: Ray's node ID (hex).
      ip: the node's address.
      resources: its total resources (``CPU``, ``GPU``, custom ones).
      is_head: whether it is the head node.
    """

    node_id: str
    ip: str
    resources: Mapping[str, float]
    is_head: bool = False

    def custom_resources(self) -> Dict[str, float]:
        """Resources other than Ray's predefined ones and its ``node:*`` markers."""
        return {k: v for k, v in self.resources.items()
                if k not in _BUILTIN_RESOURCES and not k.startswith("node:")}


def nodes_from_ray(ray_nodes: Iterable[Mapping[str, Any]]) -> List[NodeInfo]:
    """``NodeInfo`` of each live node in ``ray.nodes()``'s output."""
    out = []
    for node in ray_nodes:
        if not node.get("Alive"):
            continue
        res = dict(node.get("Resources", {}))
        out.append(NodeInfo(node_id=node["NodeID"], ip=node.get("NodeManagerAddress", "?"),
                            resources=res, is_head="node:__internal_head__" in res))
    return out


def check_custom_resources(flag: str, request: Mapping[str, float]) -> Dict[str, float]:
    """Validates a per-role custom resource request; returns it as a plain dict.

    Raises:
      ValueError: one line naming ``flag`` and the fix.
    """
    out = {}
    for name, amount in dict(request).items():
        if not isinstance(name, str) or not name or name.startswith("node:"):
            raise ValueError(f"{flag}: bad resource name {name!r}; use names like actor=1")
        if name in _BUILTIN_RESOURCES:
            what = "actor_cpus/learner_cpus" if name == "CPU" else "num_learner_replicas"
            raise ValueError(f"{flag}: {name} is not a custom resource; use {what} instead")
        try:
            amount = float(amount)
        except (TypeError, ValueError):
            raise ValueError(f"{flag}: {name}={amount!r} is not a number") from None
        if not (amount > 0 and math.isfinite(amount)):
            raise ValueError(f"{flag}: {name} must be > 0 (got {amount:g}); leave a resource out "
                             "rather than asking for 0 of it")
        out[name] = amount
    return out


@dataclasses.dataclass(frozen=True)
class ResourcePlan:
    """Ray resource requests per role, and the learner's TF thread pools."""

    learner_cpus: float
    learner_gpus: int
    actor_cpus: float
    evaluator_cpus: float
    replay_cpus: float
    learner_threads: Tuple[int, int]  # (intra_op, inter_op)
    num_learner_replicas: int
    actor_resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    learner_resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # The node the learner (the chief, with several learner workers) and a
    # separate replay server are pinned to; None on a one-node instance, where
    # there is nothing to choose.
    learner_node_id: Optional[str] = None
    learner_node_ip: Optional[str] = None
    # Learner processes; learner_cpus, learner_gpus and learner_resources are
    # what EACH of them asks for.
    num_learner_workers: int = 1
    # (node ID, node IP) of each learner worker, the chief first; empty when
    # nothing is pinned (one node).
    learner_worker_nodes: Tuple[Tuple[str, str], ...] = ()

    def describe(self) -> str:
        """One line for the console and run_info."""
        device = f"{self.learner_gpus} GPU" if self.learner_gpus else f"{self.learner_cpus:g} CPU"
        learner_extra = _format_resources(self.learner_resources)
        actor_extra = _format_resources(self.actor_resources)
        where = f" on node {self.learner_node_ip}" if self.learner_node_ip else ""
        who = "learner"
        if self.num_learner_workers > 1:
            who = f"{self.num_learner_workers} learner workers of"
            if self.learner_worker_nodes:
                where = f" on nodes {', '.join(ip for _, ip in self.learner_worker_nodes)} (chief first)"
        return (f"{who} {device}{' + ' + learner_extra if learner_extra else ''}{where} "
                f"(TF threads {self.learner_threads[0]}/{self.learner_threads[1]}), "
                f"actors {self.actor_cpus:g} CPU{' + ' + actor_extra if actor_extra else ''} each, "
                f"evaluator {self.evaluator_cpus:g} CPU, replay {self.replay_cpus:g} CPU")


def _format_resources(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items()))


def plan_resources(total_cpus: float, node_gpus: float, num_actors: int,
                   num_learner_replicas: Optional[int], *, nodes: Sequence[NodeInfo] = (),
                   actor_resources: Optional[Mapping[str, float]] = None,
                   learner_resources: Optional[Mapping[str, float]] = None,
                   actor_cpus: Optional[float] = None,
                   learner_cpus: Optional[float] = None,
                   num_learner_workers: int = 1) -> ResourcePlan:
    """Splits the cluster's CPUs and one node's GPUs between the roles of one run.

    Args:
      total_cpus: CPUs of the whole cluster (ignored when ``nodes`` is given).
      node_gpus: GPUs of the node with the most of them (the learner is one
        process, so its replicas are the GPUs of one node); ignored when
        ``nodes`` is given.
      num_actors: actor processes.
      num_learner_replicas: learner replicas; None means every GPU of that
        node, or 1 without GPUs.
      nodes: the live nodes (``nodes_from_ray(ray.nodes())``); empty means
        one anonymous node with ``total_cpus`` and ``node_gpus``.
      actor_resources, learner_resources: custom resources each actor / the
        learner asks for. None means ``{"actor": 1}`` / ``{"learner": 1}``
        when some node offers that resource, else none; ``{}`` means none.
      actor_cpus, learner_cpus: CPUs per actor / per learner worker; None
        splits the CPUs as described in the module docstring.
      num_learner_workers: learner processes (W); each asks for the
        learner's CPUs, GPUs and custom resources.

    Raises:
      ValueError: one line naming the flag to change, when the run cannot fit.
    """
    if num_learner_workers < 1:
        raise ValueError(f"num_learner_workers must be >= 1 (got {num_learner_workers})")
    for flag, value in (("actor_cpus", actor_cpus), ("learner_cpus", learner_cpus)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{flag} must be > 0 (got {value:g})")
    anonymous = not nodes
    if anonymous:
        nodes = [NodeInfo("", "", {"CPU": float(total_cpus), "GPU": float(node_gpus)}, True)]
    offered = set().union(*(n.custom_resources() for n in nodes))
    actor_req = _custom_request("actor_resources", actor_resources, ACTOR_RESOURCE, offered)
    learner_req = _custom_request("learner_resources", learner_resources, LEARNER_RESOURCE, offered)

    learner_hosts = [n for n in nodes if _holds(n, learner_req)]
    if not learner_hosts:
        raise ValueError(f"no single node offers the learner's {_format_resources(learner_req)} "
                         f"({_describe_nodes(nodes)}); change learner_resources or start a node "
                         f"with `ray start --resources '{{\"{LEARNER_RESOURCE}\": 1}}'`")
    gpus = int(max(n.resources.get("GPU", 0.0) for n in learner_hosts))
    if num_learner_replicas is None:
        num_learner_replicas = max(1, gpus)
    if gpus and num_learner_replicas > gpus:
        raise ValueError(
            f"num_learner_replicas {num_learner_replicas} needs {num_learner_replicas} GPUs on one "
            f"node but the largest has {gpus}; pass num_learner_replicas {gpus} or fewer")
    learner_gpus = num_learner_replicas if gpus else 0

    total_cpus = sum(n.resources.get("CPU", 0.0) for n in nodes)
    if total_cpus < 1 and learner_cpus is None:
        raise ValueError(f"the Ray cluster has {total_cpus:g} CPUs; it needs at least 1 for the learner")
    if learner_cpus is None:
        if learner_gpus:
            # Feeding the GPUs (Reverb sampling, tf.data) needs about one core.
            learner_cpus = 1.0
        else:
            # One core per replica, but never more than half the machine, so the
            # actors keep at least half of it; W workers share that budget.
            workers = num_learner_workers
            learner_cpus = float(max(1, min(num_learner_replicas * workers, int(total_cpus) // 2)))
            if total_cpus < 2:  # a one-core box: share it rather than refuse
                learner_cpus = total_cpus / 2
            if workers > 1:
                learner_cpus = math.floor(learner_cpus / workers * 100) / 100
                if learner_cpus < _MIN_ACTOR_CPUS:
                    raise ValueError(f"num_learner_workers {workers} leaves each worker under "
                                     f"{_MIN_ACTOR_CPUS:g} of the cluster's {total_cpus:g} CPUs; "
                                     "pass fewer workers or add nodes")
    learner_nodes = _place_learner_workers(learner_hosts, learner_req, num_learner_workers,
                                           learner_gpus, learner_cpus)
    learner_node = learner_nodes[0]

    # The CPUs actors may use: those of the nodes holding their custom
    # resources, less the learner's share where it runs on one of them.
    actor_hosts = [n for n in nodes if _holds(n, actor_req)]
    if not actor_hosts:
        raise ValueError(f"no node offers an actor's {_format_resources(actor_req)} "
                         f"({_describe_nodes(nodes)}); change actor_resources or start nodes "
                         f"with `ray start --resources '{{\"{ACTOR_RESOURCE}\": N}}'`")
    free = {n.node_id: n.resources.get("CPU", 0.0) for n in actor_hosts}
    for node in learner_nodes:
        if node.node_id in free:
            free[node.node_id] = max(0.0, free[node.node_id] - learner_cpus)
    custom_slots = sum(_slots(n, actor_req) for n in actor_hosts)
    if custom_slots < num_actors:
        raise ValueError(
            f"{num_actors} actors need {_format_resources(_times(actor_req, num_actors))} but the "
            f"cluster offers room for {custom_slots} ({_describe_nodes(actor_hosts)}); pass "
            f"num_actors {max(1, custom_slots)} or fewer, add actor nodes, or lower actor_resources")
    if actor_cpus is None:
        actor_cpus = min(1.0, sum(free.values()) / num_actors)
        actor_cpus = math.floor(actor_cpus * 100) / 100  # Ray keeps 4 decimals; 2 read better
        # Whole actors fit per node: shrink until every actor has a slot somewhere.
        while actor_cpus >= _MIN_ACTOR_CPUS and _fit(actor_hosts, free, actor_req, actor_cpus) < num_actors:
            actor_cpus = round(actor_cpus - 0.01, 2)
        if actor_cpus < _MIN_ACTOR_CPUS:
            most = int(sum(free.values()) / _MIN_ACTOR_CPUS)
            raise ValueError(
                f"{num_actors} actors do not fit in the {sum(free.values()):g} CPUs left after the "
                f"learner (each needs >= {_MIN_ACTOR_CPUS:g}); pass num_actors {max(1, most)} or "
                "fewer, or add nodes")
    elif _fit(actor_hosts, free, actor_req, actor_cpus) < num_actors:
        fits = _fit(actor_hosts, free, actor_req, actor_cpus)
        raise ValueError(
            f"{num_actors} actors of actor_cpus {actor_cpus:g} do not fit in the CPUs the actor "
            f"nodes have left after the learner ({sum(free.values()):g}, room for {fits}); lower "
            f"actor_cpus or pass num_actors {max(1, fits)} or fewer")

    threads = tf_setup.thread_counts(1 if learner_gpus else num_learner_replicas,
                                     cpus=max(1, int(learner_cpus)))
    pinned = None if anonymous or len(nodes) == 1 else learner_node
    return ResourcePlan(learner_cpus=learner_cpus, learner_gpus=learner_gpus, actor_cpus=actor_cpus,
                        evaluator_cpus=0.0, replay_cpus=0.0, learner_threads=threads,
                        num_learner_replicas=num_learner_replicas, actor_resources=actor_req,
                        learner_resources=learner_req,
                        learner_node_id=pinned.node_id if pinned else None,
                        learner_node_ip=pinned.ip if pinned else None,
                        num_learner_workers=num_learner_workers,
                        learner_worker_nodes=tuple((n.node_id, n.ip) for n in learner_nodes)
                        if pinned else ())


def _custom_request(flag: str, request: Optional[Mapping[str, float]], default_name: str,
                    offered: set) -> Dict[str, float]:
    """The explicit request (validated, and offered by some node) or the default."""
    if request is None:
        return {default_name: 1.0} if default_name in offered else {}
    request = check_custom_resources(flag, request)
    missing = sorted(set(request) - offered)
    if missing:
        shown = ", ".join(sorted(offered)) or "none"
        raise ValueError(f"{flag} asks for {', '.join(missing)} but no node offers it (custom "
                         f"resources on the cluster: {shown}); start nodes with `ray start "
                         f"--resources '{{\"{missing[0]}\": N}}'` or drop that request")
    return request


def _holds(node: NodeInfo, request: Mapping[str, float]) -> bool:
    return all(node.resources.get(k, 0.0) >= v for k, v in request.items())


def _slots(node: NodeInfo, request: Mapping[str, float]) -> int:
    """How many requests of ``request`` fit on ``node`` (by its custom resources alone)."""
    if not request:
        return 1 << 30
    # A small tolerance: Ray counts in 1e-4 units, so 1/3 + 1/3 + 1/3 must fit in 1.
    return min(int(node.resources.get(k, 0.0) / v + 1e-6) for k, v in request.items())


def _fit(hosts: Sequence[NodeInfo], free_cpus: Mapping[str, float], request: Mapping[str, float],
         cpus_each: float) -> int:
    """Actors of ``cpus_each`` CPUs and ``request`` that fit on ``hosts``, whole per node."""
    return sum(min(_slots(n, request), int(free_cpus[n.node_id] / cpus_each + 1e-6)) for n in hosts)


def _times(request: Mapping[str, float], k: int) -> Dict[str, float]:
    return {name: amount * k for name, amount in request.items()}


def _choose_learner_node(hosts: Sequence[NodeInfo], gpus: int, cpus: float) -> NodeInfo:
    """Most GPUs first, then the head (the driver and logdir usually live there)."""
    fit = [n for n in hosts if n.resources.get("GPU", 0.0) >= gpus and n.resources.get("CPU", 0.0) >= cpus]
    if not fit:
        raise ValueError(f"no node has the learner's {gpus} GPU(s) and {cpus:g} CPU(s) besides its "
                         f"custom resources ({_describe_nodes(hosts)}); lower learner_cpus or "
                         "num_learner_replicas, or add a bigger learner node")
    return max(fit, key=lambda n: (n.resources.get("GPU", 0.0), n.is_head))


def _place_learner_workers(hosts: Sequence[NodeInfo], request: Mapping[str, float], num_workers: int,
                           gpus: int, cpus: float) -> List[NodeInfo]:
    """The node of each learner worker, the chief first (see the module docstring).

    Raises:
      ValueError: one line naming ``num_learner_workers`` when the learner
        nodes cannot hold ``num_workers`` workers of ``request``, ``gpus``
        GPUs and ``cpus`` CPUs each.
    """
    if num_workers == 1:
        return [_choose_learner_node(hosts, gpus, cpus)]

    def capacity(node: NodeInfo) -> int:
        room = min(_slots(node, request), int(node.resources.get("CPU", 0.0) / cpus + 1e-6))
        if gpus:
            room = min(room, int(node.resources.get("GPU", 0.0) / gpus + 1e-6))
        return room

    room = {n.node_id: capacity(n) for n in hosts}
    total = sum(room.values())
    if total == 0:
        return [_choose_learner_node(hosts, gpus, cpus)]  # raises: not even one fits
    if total < num_workers:
        need = {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **request}
        raise ValueError(
            f"num_learner_workers {num_workers}: each learner worker needs {_format_resources(need)} "
            f"but the learner nodes have room for {total} ({_describe_nodes(hosts)}); pass "
            f"num_learner_workers {total} or fewer, add learner nodes, or lower learner_cpus"
            f"{', num_learner_replicas' if gpus > 1 else ''} or learner_resources")
    chief = _choose_learner_node([n for n in hosts if room[n.node_id]], gpus, cpus)
    placed = [chief]
    room[chief.node_id] -= 1
    count = {n.node_id: 0 for n in hosts}
    count[chief.node_id] = 1
    order = {n.node_id: i for i, n in enumerate(hosts)}
    while len(placed) < num_workers:
        # Spread: the node with the fewest workers yet; ties as for the chief.
        node = min((n for n in hosts if room[n.node_id]),
                   key=lambda n: (count[n.node_id], -n.resources.get("GPU", 0.0), not n.is_head,
                                  order[n.node_id]))
        placed.append(node)
        room[node.node_id] -= 1
        count[node.node_id] += 1
    return placed


def _describe_nodes(nodes: Sequence[NodeInfo]) -> str:
    parts = []
    for n in nodes:
        res = {"CPU": n.resources.get("CPU", 0.0), **n.custom_resources()}
        if n.resources.get("GPU"):
            res["GPU"] = n.resources["GPU"]
        parts.append(f"{n.ip or 'node'}: {_format_resources(res)}")
    return "; ".join(parts)
