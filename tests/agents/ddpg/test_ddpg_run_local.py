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
from rlplat.runners import EnvironmentFactory, Experiment, run_local

ACTION_REPEAT = 4  # physics steps per agent step (episodes: 250 agent steps); the budget counts agent steps
BAR = 600.0  # mean greedy return over EVAL_EPISODES episodes
BUDGET = 30_000
EVAL_EVERY, EVAL_EPISODES = 1000, 2


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ddpg_reaches_the_bar_on_cartpole_swingup_within_the_step_budget():
    tf.keras.utils.set_random_seed(0)
    # The run stops at the first evaluation that reaches the bar (target_eval_return).
    experiment = Experiment(DDPGBuilder(DDPGConfig()),
                            EnvironmentFactory("cartpole:swingup", {"action_repeat": ACTION_REPEAT}),
                            num_actors=1, seed=0, max_actor_steps=BUDGET, eval_every_actor_steps=EVAL_EVERY,
                            eval_episodes=EVAL_EPISODES, target_eval_return=BAR)
    out = run_local(experiment)
    curve = [(s, round(r)) for s, r in out.evaluations]
    assert out.stop_reason == "target_eval_return", (
        f"DDPG's greedy return never reached {BAR:g} in {BUDGET} agent steps; evaluations (steps, return): {curve}")
    assert out.evaluations[-1][1] >= BAR and out.actor_steps <= BUDGET, curve
