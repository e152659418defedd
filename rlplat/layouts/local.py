"""``run_local``: one process, one actor, the learner and an embedded Reverb server.

The debugging layout: no Ray, everything in one Python thread, taking turns
(a chunk of actor steps, then as many learner steps as the replay ratio
allows). It keeps no checkpoints, so it has no ``resume`` and no replay
checkpoints (``RayLayoutConfig.replay_checkpoint``): a run is one call.

Why the builder's rate limiter is replaced: in one thread a blocked insert can
never be unblocked (the learner that would sample runs on the same thread),
so a ``SampleToInsertRatio`` limiter deadlocks. Every
table is rebuilt with a ``MinSize`` limiter (same warm-up size; inserts never
block) and the layout enforces the builder's ``samples_per_insert`` itself by
counting the server's completed inserts and samples: the learner steps only
while ``samples < (inserts - min_size + 1) * samples_per_insert``. Over a run
the measured ratio matches the builder's (it is reported), overshooting by at
most one learner call.

Network: the embedded Reverb server is bound by ``reverb.Server``, which takes
only a port, so it listens on every interface. The loopback shim
(``rlplat.distributed.loopback``) can only cover a process started behind it,
and this server lives in the caller's own process, so start Python with
``LD_PRELOAD=<venv>/lib/rlplat/loopback_bind.so RLPLAT_LOOPBACK_ONLY=1`` to keep
it on loopback; otherwise ``run_local`` logs one warning with the port.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Optional

import dm_env
import numpy as np
import reverb

from rlplat import core
from rlplat import specs as specs_lib
from rlplat.distributed import loopback  # no Ray: environment and /proc checks only
from rlplat.environment_loop import EnvironmentLoop
from rlplat.replay import server as replay_server

EnvironmentFactory = Callable[[int], dm_env.Environment]


def _non_blocking(tables: List[reverb.Table]):
    """Each table rebuilt with MinSize, and (name, samples_per_insert, min_size)."""
    rebuilt, ratios = [], []
    for table in tables:
        info = table.info.rate_limiter_info
        min_size = max(1, int(info.min_size_to_sample))
        ratios.append((table.name, float(info.samples_per_insert), min_size))
        rebuilt.append(table.replace(rate_limiter=reverb.rate_limiters.MinSize(min_size)))
    return rebuilt, ratios


def _counts(client: reverb.Client, table: str):
    info = client.server_info(timeout=30)[table].rate_limiter_info
    return int(info.insert_stats.completed), int(info.sample_stats.completed)


def run_local(builder: core.AgentBuilder,
              environment_factory: EnvironmentFactory,
              num_steps: int,
              *,
              seed: int = 0,
              replicator=None,
              actor_chunk_steps: int = 250,
              eval_episodes: int = 1,
              eval_every_steps: Optional[int] = None,
              max_seconds: Optional[float] = None,
              logdir: Optional[str] = None,
              on_progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Trains ``builder``'s agent for ``num_steps`` environment steps in this process.

    Args:
      builder: the agent's ``AgentBuilder``.
      environment_factory: ``seed -> dm_env.Environment`` (e.g.
        ``lambda s: envs.make_environment("cartpole:swingup", seed=s)``).
      num_steps: environment (actor) steps to run.
      seed: the actor's seed; the evaluation environment uses ``seed + 1``.
      replicator: the learner's Replicator (default: ``make_replicator()``).
      actor_chunk_steps: actor steps between two turns of the learner.
      eval_episodes: greedy episodes run at every evaluation (0: none).
      eval_every_steps: actor steps between evaluations; None: only at the end.
      max_seconds: stop early after this wall time (checked between chunks).
      logdir: passed to ``builder.make_learner``.
      on_progress: called after every chunk with the running totals.

    Returns:
      ``actor_steps``, ``learner_steps``, ``episodes``, ``episode_returns``
      (training), ``eval_returns`` (of the last evaluation), ``evaluations``
      (list of ``(actor_steps, mean return)``), the measured
      ``samples_per_insert``, ``physics_errors``, seconds spent acting /
      learning / evaluating, and ``wall_s``.
    """
    if num_steps < 1 or actor_chunk_steps < 1:
        raise ValueError(f"num_steps ({num_steps}) and actor_chunk_steps "
                         f"({actor_chunk_steps}) must be >= 1")
    from rlplat import replication  # pylint: disable=g-import-not-at-top  (imports TF)

    start = time.perf_counter()
    environment = environment_factory(seed)
    eval_environment = environment_factory(seed + 1) if eval_episodes > 0 else None
    spec = specs_lib.make_environment_spec(environment)
    tables, ratios = _non_blocking(builder.make_replay_tables(spec, 1))
    server = replay_server.make_server(tables)
    if not loopback.active_in_this_process():
        logging.getLogger(__name__).warning(
            "run_local: the embedded Reverb server listens on all interfaces (port %d); start Python "
            "with LD_PRELOAD=%s %s=1 to keep it on loopback", server.port,
            loopback.shim_path() or "<venv>/lib/rlplat/" + loopback.SHIM_NAME, loopback.SWITCH)
    address = f"localhost:{server.port}"
    client = reverb.Client(address)
    adder = None
    try:
        replicator = replicator or replication.make_replicator()
        learner = builder.make_learner(spec, replicator, address, logdir)
        adder = builder.make_adder(address, spec)
        # In one process the learner itself is the actors' variable source.
        actor = builder.make_actor(spec, learner, adder, 0, seed)
        loop = EnvironmentLoop(environment, actor)
        eval_actor = eval_loop = None
        if eval_environment is not None:
            eval_actor = builder.make_actor(spec, learner, None, 0, seed + 1, evaluation=True)
            eval_loop = EnvironmentLoop(eval_environment, eval_actor)

        table, samples_per_insert, min_size = ratios[0]
        totals: Dict[str, Any] = {"actor_steps": 0, "episodes": 0, "physics_errors": 0,
                                  "act_s": 0.0, "learn_s": 0.0, "eval_s": 0.0}
        returns: List[float] = []
        evaluations: List[tuple] = []
        eval_returns: List[float] = []
        next_eval = eval_every_steps or num_steps
        inserts = samples = 0
        while totals["actor_steps"] < num_steps:
            stats = loop.run_steps(min(actor_chunk_steps, num_steps - totals["actor_steps"]))
            totals["actor_steps"] += stats["env_steps"]
            totals["episodes"] += stats["episodes"]
            totals["physics_errors"] += stats["physics_errors"]
            totals["act_s"] += stats["wall_s"]
            returns.extend(stats["episode_returns"])

            t0 = time.perf_counter()
            inserts, samples = _counts(client, table)
            while inserts >= min_size and samples < (inserts - min_size + 1) * samples_per_insert:
                learner.step()
                inserts, samples = _counts(client, table)
            totals["learn_s"] += time.perf_counter() - t0

            done = totals["actor_steps"] >= num_steps or (
                max_seconds is not None and time.perf_counter() - start > max_seconds)
            if eval_loop is not None and (totals["actor_steps"] >= next_eval or done):
                t0 = time.perf_counter()
                eval_actor.update(wait=True)  # Always the newest weights.
                eval_returns = [eval_loop.run_episode()["episode_return"]
                                for _ in range(eval_episodes)]
                evaluations.append((totals["actor_steps"], float(np.mean(eval_returns))))
                totals["eval_s"] += time.perf_counter() - t0
                next_eval += eval_every_steps or num_steps
            if on_progress is not None:
                on_progress(dict(totals, learner_steps=learner.num_steps,
                                 last_return=returns[-1] if returns else None,
                                 eval_return=evaluations[-1][1] if evaluations else None))
            if done:
                break
        adder.close()
        adder = None
        inserts, samples = _counts(client, table)
        totals.update({
            "learner_steps": learner.num_steps, "episode_returns": returns,
            "eval_returns": eval_returns, "evaluations": evaluations,
            "samples_per_insert": samples / max(1, inserts - min_size),
            "target_samples_per_insert": samples_per_insert,
            "wall_s": time.perf_counter() - start,
        })
        return totals
    finally:
        if adder is not None:
            try:
                adder.close()
            except Exception:  # pylint: disable=broad-except  (do not mask the real error)
                pass
        server.stop()
        for env in (environment, eval_environment):
            if env is not None:
                env.close()
