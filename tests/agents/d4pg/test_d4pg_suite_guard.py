"""The control-suite guard: D4PG with its default config learns walker:walk, not only cartpole.

One real run (``run_local``: the same builder and learner as ``rlplat train
d4pg``, one process, real MuJoCo and Reverb) with the default D4PG config on
walker:walk, evaluated greedily every 10k env steps, stops at its bar. The
bar (300) is what the defaults reach on walker:walk at about 80k env steps
(``bench/d4pg_suite.py``'s seed 0 had 423 at 80k); an untrained policy scores
20-50, and one whose learning stopped halfway to the bar (about 40k env
steps) scores 100-160 and stays there, so either fails: the run ends at its
budget below the bar.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat.experiment import Experiment
from rlplat.runners import run_local

pytestmark = [pytest.mark.slow]

TASK = "walker:walk"
BAR = 300.0
BUDGET = 150_000


def test_default_d4pg_learns_walker_walk_to_its_bar():
    experiment = Experiment(D4PGBuilder(D4PGConfig()), TASK, num_actors=1, seed=11, max_actor_steps=BUDGET,
                            eval_every_actor_steps=10_000, eval_episodes=3, target_eval_return=BAR)
    result = run_local(experiment)
    curve = result.evaluations
    assert curve, "no evaluation ran"
    first_steps, first_return = curve[0]
    assert first_return < BAR / 2, curve  # the untrained start is far below the bar
    reached = [(steps, value) for steps, value in curve if value >= BAR]
    assert reached, f"{TASK} never reached {BAR:g} in {BUDGET:,} env steps: {curve}"
    print(f"\n{TASK}: {reached[0][1]:.0f} at {reached[0][0]:,} env steps; curve {curve}")
