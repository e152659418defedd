"""A real D4PG teacher for the BC tests: trained by ``run_local`` into a run directory.

``train_teacher``'s run directory holds what a ``rlplat train d4pg`` run leaves for
``rlplat eval``: ``config.json`` (``agent``, ``env``), ``run_info.json`` (``builder``)
and ``checkpoints/ckpt-<learner step>`` holding the learner's ``checkpointables()``.
"""

from __future__ import annotations

from typing import Any, Dict

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig

TASK = "cartpole:balance_sparse"
# Measured on this 2-core machine (agents/bc/README.md): with these settings D4PG's greedy
# policy first holds balance_sparse's pole (1000) after 20k-50k env steps, depending on the
# seed and the run; a zero action scores ~390 and a random one ~20-100.
TEACHER_CONFIG = D4PGConfig(policy_layer_sizes=(64, 64), critic_layer_sizes=(128, 128), global_batch_size=128,
                            policy_learning_rate=3e-4, critic_learning_rate=3e-4, min_replay_size=1000)
# The teacher trains until a greedy evaluation (every TEACHER_EVAL_EVERY env steps, 3
# episodes) reaches TEACHER_BAR, or for TEACHER_MAX_STEPS: a budget, not a horizon, as
# tests/distributed/test_distributed_learning.py does (run_local's Reverb sampling is not
# deterministic, so the step at which one seed clears the bar varies between runs).
TEACHER_BAR = 950.0
TEACHER_EVAL_EVERY = 5_000
TEACHER_MAX_STEPS = 100_000


def make_environment(seed: int):
    import rlplat_envs as envs

    return envs.make_environment(TASK, seed=seed)


def train_teacher(logdir: str, seed: int = 0, config: D4PGConfig = TEACHER_CONFIG) -> Dict[str, Any]:
    """Trains D4PG on ``TASK`` in one process into the run directory ``logdir``.

    ``run_local`` with a logdir writes what ``rlplat eval`` reads (config.json,
    run_info.json, checkpoints); the run stops at the first evaluation that
    reaches ``TEACHER_BAR`` (``target_eval_return``) or at the budget.
    Returns ``{"actor_steps", "learner_steps", "evaluations": [(actor steps, mean return)]}``.
    """
    from rlplat.runners import Experiment, LocalLayout, run_local

    experiment = Experiment(D4PGBuilder(config), TASK, seed=seed, num_actors=1, max_actor_steps=TEACHER_MAX_STEPS,
                            eval_every_actor_steps=TEACHER_EVAL_EVERY, eval_episodes=3,
                            target_eval_return=TEACHER_BAR, logdir=logdir)
    result = run_local(experiment, LocalLayout(actor_chunk_steps=1000))
    return {"actor_steps": result.actor_steps, "learner_steps": result.learner_steps,
            "evaluations": list(result.evaluations)}


def greedy_returns(logdir: str, num_episodes: int, seed: int) -> list:
    """The saved run's greedy returns on ``make_environment(seed)``, as ``rlplat eval`` measures them."""
    from rlplat import evaluation, specs

    run = evaluation.read_run(logdir)
    step, prefix = run.checkpoint()
    builder, environment = evaluation.make_builder(run), make_environment(seed)
    try:
        source = evaluation.restore_policy(builder, specs.make_environment_spec(environment), prefix, step)
        return [s["episode_return"] for s in evaluation.run_episodes(builder, environment, source,
                                                                     num_episodes, seed)]
    finally:
        environment.close()
