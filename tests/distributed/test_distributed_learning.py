"""D4PG learns on the real stack: local Ray, 2 actors, Reverb in the learner, real MuJoCo.

Two baselines are measured in the same test on the same task: a uniform
random policy and the untrained greedy policy (D4PG's near-zero initial
actions already keep cartpole:balance's pole up for ~670-770 of 1000). The trained
greedy policy must close half of the gap from the better of the two to the
task's maximum of 1000, so neither an untrained policy nor one that stopped
halfway passes. The rate limiter holds samples-per-insert, so the outcome
depends on env steps, not on how fast or loaded the machine is; only the wall
time does.
"""

import json

import numpy as np
import pytest

TASK = "cartpole:balance"
# Evaluate every EVAL_EVERY steps and stop at the first evaluation that clears
# the bar; MAX_ACTOR_STEPS bounds the run. One fixed horizon (40k) passed and
# failed on different runs (~650 vs ~525 at 40k), so the budget is a ceiling;
# it costs steps only on a run that has not cleared the bar yet.
EVAL_EVERY = 10_000
MAX_ACTOR_STEPS = 200_000
# Smaller networks than the defaults: the learner, which sets the pace at
# samples-per-insert 32, costs a fraction per step, so the suite stays short
# on slow machines; the algorithm and the stack are the same.
CONFIG_CHANGES = dict(policy_layer_sizes=(64, 64), critic_layer_sizes=(128, 128))


MAX_RETURN = 1000.0  # 1000 steps, rewards in [0, 1]
# Half of the gap. With these networks a CI run went 105 (10k) 385 (40k) 641
# (50k) 818 (70k) 844 (90k) 876 (150k) against an untrained policy's 671 and
# a random one's 324: balance's reward pays less for large actions, so the
# early greedy policies level off near 850-880 and a bar at 70% of the gap
# (901) failed that run. Half of it (836) still fails the untrained policy and
# any run that stopped learning before ~70k steps.
GAP_CLOSED = 0.5


def _policy_return(policy, num_episodes=3, seed=0):
    import rlplat_envs as envs

    env = envs.make_environment(TASK, seed=seed)
    returns = []
    try:
        for _ in range(num_episodes):
            timestep, total = env.reset(), 0.0
            while not timestep.last():
                timestep = env.step(policy(timestep.observation, env.action_spec().shape))
                total += timestep.reward
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns))


def _random_policy_return():
    rng = np.random.default_rng(0)
    return _policy_return(lambda obs, shape: rng.uniform(-1.0, 1.0, shape).astype(np.float32))


def _untrained_policy_return(config):
    import tensorflow as tf

    from rlplat_agents.d4pg import networks

    tf.keras.utils.set_random_seed(1)
    policy = None

    def act(obs, shape):
        nonlocal policy
        if policy is None:
            policy = networks.make_policy_network(int(np.prod(shape)), config.policy_layer_sizes,
                                                  config.torso_init)
        return policy(obs[None].astype(np.float32)).numpy()[0]

    return _policy_return(act)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_d4pg_beats_random_policy_by_far(tmp_path):
    from rlplat_agents.d4pg.builder import D4PGBuilder
    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat.distributed.layout import RayLayoutConfig, run_on_ray

    config = D4PGConfig(**CONFIG_CHANGES)
    random_return, untrained_return = _random_policy_return(), _untrained_policy_return(config)
    baseline = max(random_return, untrained_return)
    bar = baseline + GAP_CLOSED * (MAX_RETURN - baseline)
    logdir = tmp_path / "run"
    knobs = RayLayoutConfig(eval_every_actor_steps=EVAL_EVERY, eval_episodes=3, checkpoint_every_s=3600.0,
                            target_eval_return=bar)
    run_on_ray(D4PGBuilder(config=config), TASK, num_actors=2, max_actor_steps=MAX_ACTOR_STEPS,
                         logdir=str(logdir), seed=1, console=False, layout=knobs)

    evaluations = [r for r in map(json.loads, (logdir / "metrics.jsonl").read_text().splitlines())
                   if r.get("role") == "evaluator"]
    curve = [(r["step"], round(r["eval_return"], 1)) for r in evaluations]
    print(f"random policy {random_return:.1f}, untrained policy {untrained_return:.1f}, bar {bar:.1f}, "
          f"D4PG evaluations {curve}")
    assert evaluations, "no evaluation ran"
    best = max(evaluations, key=lambda r: r["eval_return"])
    # The greedy policy used learned weights, not the initial ones.
    assert best["policy_version"] > 0
    assert best["eval_return"] >= bar, (curve, random_return, untrained_return)
