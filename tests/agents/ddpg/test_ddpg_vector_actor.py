"""DDPG's vector actor (``--envs-per-actor K``) acts and records exactly as K separate DDPG actors.

Real MuJoCo cartpole, real Reverb (``vector_actor_check``): K ``make_actor``
actors with their own ``make_adder`` adders against the one
``make_vector_actor`` actor; the tables must hold the same items, bit for
bit, and the episodes the same returns.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from fixed_weights import FixedWeights
import vector_actor_check

TASK = "cartpole:swingup"
SEEDS = [5, 6, 7]
TIME_LIMITS = [31, 40, 52]
INDICES = [3, 4, 5]


@pytest.mark.slow
def test_the_vector_actor_writes_what_k_separate_actors_write():
    from rlplat_agents.ddpg.builder import DDPGBuilder
    from rlplat_agents.ddpg.config import DDPGConfig
    import rlplat_envs as envs
    from rlplat import specs
    from rlplat.gaussian_actor import GaussianVectorActor

    builder = DDPGBuilder(DDPGConfig(sigma=0.4, n_step=3))
    with envs.make_environment(TASK, seed=0) as env:
        spec = specs.make_environment_spec(env)
    rng = np.random.default_rng(3)
    arrays = [rng.normal(0, 0.3, v.shape).astype(np.float32) for v in builder.make_policy_network(spec)[1]]
    source = FixedWeights(arrays)
    assert isinstance(builder.make_vector_actor(spec, source, None, SEEDS), GaussianVectorActor)

    steps = len(SEEDS) * 100 + 2  # episodes end in every stream; a last partial round
    runs = [vector_actor_check.record(builder, spec, source, vector=vector, task=TASK, seeds=SEEDS,
                                      time_limits=TIME_LIMITS, indices=INDICES, loop_steps=steps)
            for vector in (False, True)]
    (separate_stats, separate), (vector_stats, vector) = runs
    assert vector_stats["episodes"] == separate_stats["episodes"] >= 6
    assert vector_stats["episode_returns"] == separate_stats["episode_returns"]
    assert len(vector) >= steps - 3 * 2
    vector_actor_check.assert_same_items(separate, vector)
