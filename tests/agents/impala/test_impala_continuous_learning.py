"""IMPALA's Gaussian policy learns a tiny continuous task with a known optimum.

Single process, no Ray or Reverb (``impala_local.LocalIMPALA``): the real
actor (NumPy acting path, sampling, recorded log-probs), the real learner
step (V-trace, losses, Adam) and the default ``IMPALAConfig``. The task,
``PointMass``, has control-suite traits that broke the Gaussian head: rewards
in [0, 1] per step, values near 1 / (1 - discount), episodes cut by a time
limit, actions clipped to [-1, 1]. A random policy scores ~11, the optimum
~95 (a PD controller); a policy whose greedy action collapsed to a constant
push scores ~3.

The default config's 100-step unrolls cover the whole episode. With 20-step
unrolls (the default before) the same run collapses to a constant push (greedy -0.7 on both sides, return
~4) while the V-trace targets climb past the 100 that rewards <= 1 allow at
discount 0.99: the policy gradient leans on a bootstrapped value that is
still far from the truth (a frozen random policy's value needs ~150 learner
steps to reach its scale) and drives the states to where that value is
overestimated. 50-step unrolls learned on 1 seed of 3.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from rlplat_agents.impala.config import IMPALAConfig
from impala_local import LocalIMPALA, PointMass, greedy_action, random_return

LEARNER_STEPS = 150
EVAL_EVERY = 25
CONFIG = IMPALAConfig()  # 100-step unrolls: whole episodes here
# A run is not bit-reproducible (thread scheduling in TF's reductions), and on
# some CPUs an occasional seed peaks near 50 and decays (seen once in CI, 0 of
# 17 runs on seeds 0-10 here). A second seed is tried only when the first
# misses, so a learner that cannot learn still fails, on both.
SEEDS = (0, 1)


def _train_until_bar(seed: int, bar: float):
    """Trains until the last two evaluations clear ``bar`` with the greedy action
    pushing back towards x = 0 on both sides; returns (passed, curve, pushes)."""
    curve = []
    with LocalIMPALA(lambda s: PointMass(s), CONFIG, seed=seed) as run:
        for _ in range(LEARNER_STEPS // EVAL_EVERY):
            run.train(EVAL_EVERY)
            curve.append((run.actor_steps, round(run.evaluate(10), 1)))
            pushes = (float(greedy_action(run, [0.5, 0.0])[0]),
                      float(greedy_action(run, [-0.5, 0.0])[0]))
            if (len(curve) >= 2 and min(r for _, r in curve[-2:]) >= bar
                    and pushes[0] < -0.3 and pushes[1] > 0.3):
                return True, curve, pushes
    return False, curve, pushes


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_gaussian_impala_learns_point_mass_far_above_random():
    random = random_return(PointMass(seed=123), num_episodes=20)
    bar = max(4.0 * random, 60.0)  # ~44 and 60; the optimum is ~95
    tries = []
    for seed in SEEDS:
        passed, curve, pushes = _train_until_bar(seed, bar)
        print(f"seed {seed}: random {random:.1f}, bar {bar:.1f}, greedy evaluations {curve}, "
              f"a(0.5, 0) = {pushes[0]:+.2f}, a(-0.5, 0) = {pushes[1]:+.2f}")
        tries.append((seed, curve, pushes))
        if passed:
            return
    pytest.fail(f"no seed held {bar:.1f} over two evaluations with the greedy action pushing "
                f"back towards x = 0 within {LEARNER_STEPS} learner steps: {tries}")
