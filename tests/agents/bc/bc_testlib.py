"""A real D4PG teacher for the BC tests: trained by ``run_local``, saved as a run directory.

``train_teacher`` writes what a ``rlplat train d4pg`` run leaves for ``rlplat eval``:
``config.json`` (``agent``, ``env``), ``run_info.json`` (``builder``) and
``checkpoints/ckpt-<learner step>`` holding the learner's ``checkpointables()``.
"""

from __future__ import annotations

import dataclasses
import os
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


@dataclasses.dataclass(frozen=True)
class _KeepLearner(D4PGBuilder):
    """D4PG, keeping a handle on the learner ``run_local`` makes (to checkpoint it afterwards)."""

    kept: Any = dataclasses.field(default_factory=list, compare=False)

    def make_learner(self, *args, **kwargs):
        learner = super().make_learner(*args, **kwargs)
        self.kept.append(learner)
        return learner


class _Cleared(Exception):
    """Raised from run_local's on_progress to end the run at the first evaluation that clears the bar."""


def train_teacher(logdir: str, seed: int = 0, config: D4PGConfig = TEACHER_CONFIG) -> Dict[str, Any]:
    """Trains D4PG on ``TASK`` in one process and saves it as a run directory.

    Returns ``{"actor_steps", "learner_steps", "evaluations": [(actor steps, mean return)]}``.
    """
    from rlplat.layouts import run_local
    from rlplat.utils import checkpointing, run_info

    builder, progress, steps = _KeepLearner(config), [], []

    def on_progress(totals):
        steps.append(totals["actor_steps"])
        if totals["actor_steps"] % TEACHER_EVAL_EVERY == 0 and totals["eval_return"] is not None:  # a new one
            progress.append((totals["actor_steps"], totals["eval_return"]))
            if totals["eval_return"] >= TEACHER_BAR:
                raise _Cleared()

    try:
        run_local(builder, make_environment, TEACHER_MAX_STEPS, seed=seed, actor_chunk_steps=1000,
                  eval_episodes=3, eval_every_steps=TEACHER_EVAL_EVERY, on_progress=on_progress)
    except _Cleared:
        pass
    learner = builder.kept[0]
    run_info.write_run_info(logdir, {"agent": config.to_dict(), "env": TASK, "env_kwargs": {}, "seed": seed},
                            extra={"builder": "D4PGBuilder"})
    checkpointing.Checkpointer(os.path.join(logdir, "checkpoints"),
                               **learner.checkpointables()).save(learner.num_steps)
    return {"actor_steps": steps[-1], "learner_steps": learner.num_steps,
            "evaluations": progress}


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
