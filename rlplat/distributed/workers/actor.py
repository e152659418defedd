"""An acting worker: environments, the builder's actor and adders, stepped in chunks per Ray call."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional

from rlplat import replay_shards
from rlplat.distributed import process
from rlplat import seeding
from rlplat.distributed.variables import RemoteVariableSource
from rlplat.distributed.workers import common


class ActorWorker:
    """One actor: an environment, the builder's actor, and an adder to replay.

    Args:
      builder: the agent's ``AgentBuilder``.
      environment: the run's ``EnvironmentFactory`` (``seed -> dm_env.Environment``).
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
      weights_per_node: on another node, fetch each policy version as one
        object per node (``RemoteVariableSource(per_node=...)``).
      weight_relay: on another node, read the policy from the shared memory of
        that node's relay (``RemoteVariableSource(relay=...)``).
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

    def __init__(self, builder, environment,
                 actor_index: int, seed: int, variable_source, replay_address: Optional[str],
                 weights_timeout_s: float = 60.0, startup_timeout_s: float = 300.0,
                 incarnation: int = 0, prefetch_weights: bool = False, envs_per_actor: int = 1,
                 shared_weights: bool = True, weights_per_node: bool = True, weight_relay: bool = False):
        started = time.perf_counter()
        self.init_entered = time.time()  # wall clock, in the placement record (``placement._where_am_i``)
        # No TensorFlow here: the policy runs in NumPy and replay is written
        # through reverb_client (3 CPU-s less per actor process).
        process.setup_light_worker()
        from rlplat import specs  # pylint: disable=g-import-not-at-top

        self._index = int(actor_index)
        self._restarted = incarnation > 0 or common.was_restarted()
        # A replacement (or a process Ray restarted) gets the same arguments as
        # the first; a fresh seed keeps it from replaying the first one's episodes.
        self._seed = seeding.restart_seed(seed, os.getpid()) if self._restarted else int(seed)
        k = int(envs_per_actor)
        seeds = [self._seed] + [seeding.actor_seed(self._seed, j) for j in range(1, k)]
        self._environments = [common.make_environment(environment, s) for s in seeds]
        spec = specs.make_environment_spec(self._environments[0])
        self._source = RemoteVariableSource(variable_source, timeout_s=weights_timeout_s,
                                            first_timeout_s=startup_timeout_s,
                                            prefetch=prefetch_weights, shared=shared_weights,
                                            per_node=weights_per_node, relay=weight_relay)
        if replay_address is None:
            replay_address = self._source.replay_address()
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
            actors = [self._make_actor(builder, spec, adder, self._index * k + j, s)
                      for j, (adder, s) in enumerate(zip(self._adders, seeds))]
            self._actor = actors[0]
        self._actor.update(wait=True)
        if k == 1:
            self._loop = common.make_loop(self._environments[0], self._actor)
        else:
            from rlplat.vector_loop import VectorEnvironmentLoop  # pylint: disable=g-import-not-at-top

            self._loop = VectorEnvironmentLoop(self._environments, actors)
        self._total_steps = 0
        # How long a (re)start takes in here: environment, adders, the actor from the learner, its weights.
        self._init_s = time.perf_counter() - started

    def _make_actor(self, builder, spec, adder, actor_index: int, seed: int):
        """The builder's actor, built by the learner where it can be rebound here (no TensorFlow in this
        process: ``LearnerWorker.make_unbound_actor``), else built here."""
        actor = self._source.make_unbound_actor(actor_index, seed)
        if actor is None:
            return builder.make_actor(spec, self._source, adder, actor_index, seed)
        actor.bind_source(self._source)
        actor.bind_adder(adder)
        return actor

    def info(self) -> Dict[str, Any]:
        """Identity of this worker (for tests and the run log)."""
        return {"actor_index": self._index, "seed": self._seed, "pid": os.getpid(),
                "node_ip": common.node_ip(), "policy_version": self._actor.policy_version,
                "restarted": self._restarted, "init_s": self._init_s}

    def run_steps(self, num_steps: int) -> Dict[str, Any]:
        """Runs ``num_steps`` environment steps; returns the loop's stats plus ours.

        Added keys: ``actor_index``, ``seed``, ``env_steps``, ``seconds``,
        ``steps_per_second``, ``policy_version`` (of the weights at the end of
        the chunk), ``weight_pulls`` (pulls that moved weights, in total),
        ``restarted``, ``pid`` and ``init_s`` (seconds ``__init__`` took); the
        first chunk adds ``first_step_time`` (wall clock).
        """
        start, first_chunk = time.perf_counter(), self._total_steps == 0
        started_at = time.time()
        stats = common.to_python(dict(self._loop.run_steps(int(num_steps)) or {}))
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
        if first_chunk:  # this process's first step (wall clock, for the run's start-up times)
            stats["first_step_time"] = started_at
        return stats

    def close(self) -> None:
        """Flushes the adder and frees the environment (best effort)."""
        for thing in self._adders + self._environments:
            try:
                thing.close()
            except Exception:  # pylint: disable=broad-except
                pass
