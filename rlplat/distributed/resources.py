"""How much of the cluster each role asks Ray for (no Ray import).

Ray's ``num_cpus`` is a scheduling promise, not a cgroup: it decides how many
workers fit, while the OS shares the cores. The plan follows where the time
goes (DESIGN.md section 5):

- the learner is the bottleneck at samples_per_insert 32, so it gets whole
  CPUs (1 on a small machine) or GPUs when the cluster has them;
- actors split what is left, fractionally (0.5 each for 2 actors on 2 cores),
  at most one CPU each, since an actor runs one environment on one thread;
- the evaluator and a separate replay server ask for 0 CPUs: the evaluator is
  idle between evaluations, and replay work is charged to the actors that
  insert and the learner that samples. Reserving a CPU for either would leave
  no room for the actors on a 2-core machine.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

from rlplat.utils import tf_setup

# Below this an actor would be scheduled but starved; more actors than this
# allows need more CPUs, not smaller slices.
_MIN_ACTOR_CPUS = 0.05


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

    def describe(self) -> str:
        """One line for the console and run_info."""
        device = f"{self.learner_gpus} GPU" if self.learner_gpus else f"{self.learner_cpus:g} CPU"
        return (f"learner {device} (TF threads {self.learner_threads[0]}/{self.learner_threads[1]}), "
                f"actors {self.actor_cpus:g} CPU each, evaluator {self.evaluator_cpus:g} CPU, "
                f"replay {self.replay_cpus:g} CPU")


def plan_resources(total_cpus: float, node_gpus: float, num_actors: int,
                   num_learner_replicas: Optional[int]) -> ResourcePlan:
    """Splits the cluster's CPUs and one node's GPUs between the roles of one run.

    Args:
      total_cpus: CPUs of the whole cluster.
      node_gpus: GPUs of the node with the most of them (the learner is one
        process, so its replicas are the GPUs of one node).
      num_actors: actor processes.
      num_learner_replicas: learner replicas; None means every GPU of that
        node, or 1 without GPUs.

    Raises:
      ValueError: one line naming the flag to change, when the run cannot fit.
    """
    if num_actors < 1:
        raise ValueError(f"--num-actors must be >= 1 (got {num_actors})")
    gpus = int(node_gpus)
    if num_learner_replicas is None:
        num_learner_replicas = max(1, gpus)
    if num_learner_replicas < 1:
        raise ValueError(f"--num-learner-replicas must be >= 1 (got {num_learner_replicas})")
    if total_cpus < 1:
        raise ValueError(f"the Ray cluster has {total_cpus:g} CPUs; it needs at least 1 for the learner")

    if gpus and num_learner_replicas > gpus:
        raise ValueError(
            f"--num-learner-replicas {num_learner_replicas} needs {num_learner_replicas} GPUs on one "
            f"node but the largest has {gpus}; pass --num-learner-replicas {gpus} or fewer")
    learner_gpus = num_learner_replicas if gpus else 0

    if learner_gpus:
        # Feeding the GPUs (Reverb sampling, tf.data) needs about one core.
        learner_cpus = 1.0
    else:
        # One core per replica, but never more than half the machine, so the
        # actors keep at least half of it.
        learner_cpus = float(max(1, min(num_learner_replicas, int(total_cpus) // 2)))
        if total_cpus < 2:  # a one-core box: share it rather than refuse
            learner_cpus = total_cpus / 2

    left = max(0.0, total_cpus - learner_cpus)
    actor_cpus = min(1.0, left / num_actors)
    actor_cpus = math.floor(actor_cpus * 100) / 100  # Ray keeps 4 decimals; 2 read better
    if actor_cpus < _MIN_ACTOR_CPUS:
        most = int(left / _MIN_ACTOR_CPUS)
        raise ValueError(
            f"{num_actors} actors do not fit in the {left:g} CPUs left after the learner "
            f"(each needs >= {_MIN_ACTOR_CPUS:g}); pass --num-actors {max(1, most)} or fewer, "
            "or add nodes")

    threads = tf_setup.thread_counts(1 if learner_gpus else num_learner_replicas,
                                     cpus=max(1, int(learner_cpus)))
    return ResourcePlan(learner_cpus=learner_cpus, learner_gpus=learner_gpus, actor_cpus=actor_cpus,
                        evaluator_cpus=0.0, replay_cpus=0.0, learner_threads=threads,
                        num_learner_replicas=num_learner_replicas)
