"""DDPG learns cartpole:swingup in one process (``run_local``: real Reverb, real MuJoCo) within a step budget.

Random actions score ~0-30 here. Measured first (see agents/ddpg/README.md), then the budget set with margin;
the run stops as soon as a greedy evaluation reaches the bar, so a healthy run takes a fraction of it.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MUJOCO_GL", "osmesa")

import pytest
import tensorflow as tf

from rlplat_agents.ddpg.builder import DDPGBuilder
from rlplat_agents.ddpg.config import DDPGConfig
from rlplat_envs import make_environment
from rlplat.layouts import run_local

ACTION_REPEAT = 4  # physics steps per agent step (episodes: 250 agent steps); the budget counts agent steps
BAR = 600.0  # mean greedy return over EVAL_EPISODES episodes
BUDGET = 30_000
EVAL_EVERY, EVAL_EPISODES = 1000, 2


class _Reached(Exception):
    pass


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ddpg_reaches_the_bar_on_cartpole_swingup_within_the_step_budget():
    tf.keras.utils.set_random_seed(0)

    def stop_at_the_bar(progress):
        if progress["eval_return"] is not None and progress["eval_return"] >= BAR:
            raise _Reached(progress["actor_steps"])

    try:
        out = run_local(DDPGBuilder(DDPGConfig()),
                        lambda seed: make_environment("cartpole:swingup", seed=seed, action_repeat=ACTION_REPEAT),
                        num_steps=BUDGET, seed=0, eval_every_steps=EVAL_EVERY, eval_episodes=EVAL_EPISODES,
                        on_progress=stop_at_the_bar)
    except _Reached as reached:
        assert reached.args[0] <= BUDGET
        return
    pytest.fail(f"DDPG's greedy return never reached {BAR:g} in {BUDGET} agent steps; evaluations "
                f"(steps, return): {[(s, round(r)) for s, r in out['evaluations']]}")
