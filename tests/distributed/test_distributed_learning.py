"""D4PG learns on the real stack: local Ray, 2 actors, Reverb in the learner, real MuJoCo.

The random-policy baseline is measured in the same test on the same task, and
the trained greedy policy must beat it by a wide margin. The rate limiter
holds samples-per-insert, so the outcome depends on env steps, not on how
fast or loaded the machine is; only the wall time does.
"""

import numpy as np
import pytest

TASK = "cartpole:balance"
ACTOR_STEPS = 40_000


def _random_policy_return(num_episodes=3, seed=0):
    import envs

    env = envs.make_environment(TASK, seed=seed)
    rng = np.random.default_rng(seed)
    returns = []
    try:
        for _ in range(num_episodes):
            timestep, total = env.reset(), 0.0
            while not timestep.last():
                action = rng.uniform(-1.0, 1.0, env.action_spec().shape).astype(np.float32)
                timestep = env.step(action)
                total += timestep.reward
            returns.append(total)
    finally:
        env.close()
    return float(np.mean(returns))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_d4pg_beats_random_policy_by_far(tmp_path):
    from agents.d4pg.builder import D4PGBuilder
    from agents.d4pg.config import D4PGConfig
    from rlplat.distributed.layout import RayLayoutConfig, run_on_ray

    random_return = _random_policy_return()
    knobs = RayLayoutConfig(eval_every_actor_steps=ACTOR_STEPS, eval_episodes=3, checkpoint_every_s=3600.0)
    summary = run_on_ray(D4PGBuilder(config=D4PGConfig()), TASK, num_actors=2, max_actor_steps=ACTOR_STEPS,
                         logdir=str(tmp_path / "run"), seed=1, console=False, layout=knobs)

    trained_return = summary["eval_return"]
    print(f"random policy {random_return:.1f}, D4PG after {summary['actor_steps']} steps {trained_return:.1f}")
    assert summary["actor_steps"] >= ACTOR_STEPS
    # The greedy policy used learned weights, not the initial ones.
    assert summary["eval_policy_version"] > 0
    assert trained_return >= max(2.0 * random_return, random_return + 300.0), (trained_return, random_return)
