"""What a ``run_on_ray`` run reports: its summary and the shaping of logged records (no Ray import)."""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List

from rlplat.experiment import RunResult


def summarize(driver, seconds: float) -> RunResult:
    """The ``RunResult`` of ``driver`` (a ``driver.Driver``) after ``run``.

    ``env_steps_per_second`` and ``learner_steps_per_second`` are measured
    from the first actor result to the last one (steady state: worker
    start-up, the final checkpoint and shutdown are left out).
    """
    loop, counts, workers = driver.loop, driver.counts, driver.workers
    start, end = loop.steady_start, loop.steady_end
    env_rate = learn_rate = None
    if start and end and end[0] > start[0]:
        env_rate = (end[1] - start[1]) / (end[0] - start[0])
        learn_rate = (end[2] - start[2]) / (end[0] - start[0])
    loop_s = None
    if loop.loop_started is not None:
        loop_s = (loop.loop_ended or time.monotonic()) - loop.loop_started
    details = {
        "actor_restarts": counts.restarts,
        "physics_errors": counts.physics_errors, "env_errors": counts.env_errors,
        "eval_policy_version": counts.eval.get("policy_version"),
        "actor_policy_versions": [s.policy_version for s in workers.slots],
        "actor_seeds": [s.seed for s in workers.slots],
        "actors": [s.describe() for s in workers.slots],
        "env_steps_per_second": env_rate, "learner_steps_per_second": learn_rate,
        "replay_size": loop.replay_stats.get("replay_size"),
        "replay_address": workers.replay_address,
        "replay_shards": list(loop.replay_shard_stats),
        "replay_restored_items": counts.replay_restored_items,
        "colocate_replay": workers.colocate if workers.plan is not None else None,
        "learner_workers": workers.learner_workers if workers.learner is not None else None,
        "placement": workers.plan.describe() if workers.plan is not None else None,
        "node_placement": workers.node_placement,
        "loop_s": loop_s, **driver.phases,
    }
    return RunResult(
        actor_steps=counts.actor_steps, learner_steps=counts.learner_steps, episodes=counts.episodes,
        eval_return=counts.eval.get("eval_return"), evaluations=tuple(counts.evaluations),
        stop_reason=loop.stop_reason, checkpoint=counts.checkpoint_path, logdir=driver.logdir,
        samples_per_insert=loop.replay_stats.get("samples_per_insert"), seconds=seconds,
        details=details)


def episode_returns(stats: Dict[str, Any]) -> List[float]:
    """The returns of the episodes an actor's chunk finished (``[]`` when it finished none)."""
    for key in ("episode_returns", "returns"):
        value = stats.get(key)
        if isinstance(value, list):
            return [float(v) for v in value]
    return []


def time_breakdown(stats: Dict[str, Any]) -> Dict[str, float]:
    """Where an actor's chunk went: seconds per part (env, policy, observe, update, other).

    ``EnvironmentLoop.run_steps`` reports ``env_s``, ``policy_s``,
    ``observe_s`` (the adder's writes), ``update_s`` (weight pulls) and
    ``wall_s``; the fractions make a slow part stand out in TensorBoard.
    """
    wall = stats.get("wall_s")
    if not isinstance(wall, (int, float)) or wall <= 0:
        return {}
    out = {}
    accounted = 0.0
    for part in ("env", "policy", "observe", "update"):
        value = stats.get(f"{part}_s")
        if isinstance(value, (int, float)):
            out[f"time_{part}_fraction"] = float(value) / wall
            accounted += float(value)
    out["time_other_fraction"] = max(0.0, wall - accounted) / wall
    return out


def finite(record: Dict[str, Any]) -> Dict[str, Any]:
    """Drops None and non-finite values (they are 'not measured yet', not data)."""
    return {k: v for k, v in record.items()
            if v is not None and not (isinstance(v, float) and not math.isfinite(v))}
