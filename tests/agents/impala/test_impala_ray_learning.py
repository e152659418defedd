"""IMPALA learns on the real stack: local Ray, 2 actors, the Reverb queue in the learner, CartPole.

The random-policy baseline is measured in the same test. The bar is 475 of
CartPole-v1's 500: an untrained policy (~10-40), a random one (~22) and one
that stopped learning halfway all fail it. The run stops at the first
evaluation that clears the bar; MAX_ACTOR_STEPS bounds it (3 seeds of
`bench/impala_learning.py` reached 500 within 20k-160k env steps and held it to 1M).
"""

import json

import numpy as np
import pytest

TASK = "gym:CartPole-v1"
EVAL_EVERY = 20_000
MAX_ACTOR_STEPS = 600_000
BAR = 475.0


def _random_policy_return(num_episodes=20, seed=0):
    import rlplat_envs as envs

    rng = np.random.default_rng(seed)
    returns = []
    with envs.make_environment(TASK, seed=seed) as env:
        for _ in range(num_episodes):
            timestep, total = env.reset(), 0.0
            while not timestep.last():
                timestep = env.step(int(rng.integers(2)))
                total += timestep.reward
            returns.append(total)
    return float(np.mean(returns))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_impala_beats_random_policy_by_far_on_cartpole(tmp_path):
    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig
    from rlplat.runners import Experiment, RayLayoutConfig, run_on_ray

    random_return = _random_policy_return()
    bar = BAR
    assert bar > 10 * random_return  # the bar is far above chance
    logdir = tmp_path / "run"
    experiment = Experiment(IMPALABuilder(config=IMPALAConfig()), TASK, num_actors=2, max_actor_steps=MAX_ACTOR_STEPS,
                            logdir=str(logdir), seed=1, eval_every_actor_steps=EVAL_EVERY, eval_episodes=3,
                            checkpoint_every_s=3600.0, target_eval_return=bar)
    summary = run_on_ray(experiment, RayLayoutConfig(console=False))

    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    evaluations = [r for r in records if r.get("role") == "evaluator"]
    curve = [(r["step"], round(r["eval_return"], 1)) for r in evaluations]
    print(f"random policy {random_return:.1f}, bar {bar:.1f}, IMPALA evaluations {curve}, "
          f"{summary['seconds']:.0f}s")
    assert evaluations, "no evaluation ran"
    best = max(evaluations, key=lambda r: r["eval_return"])
    assert best["policy_version"] > 0
    assert best["eval_return"] >= bar, (curve, random_return)
    # Policy lag reached the learner's logs.
    learner = [r for r in records if r.get("role") == "learner" and "policy_lag_mean" in r]
    lags = [(r["step"], r.get("policy_lag_mean")) for r in records if r.get("role") == "learner"]
    assert learner and all(r["policy_lag_mean"] >= 0 for r in learner), (lags, curve)
