"""D4PG's vector actor acts and records exactly as K separate D4PG actors (real MuJoCo, real Reverb).

Both runs step the same K cartpole environments (``vector_actor_check``):
the reference with K ``make_actor`` actors and ``make_adder`` adders, the
other with the one ``make_vector_actor`` actor. The "log" sigma schedule gives every
environment its own noise scale, so the actor indices matter too. The two
tables must hold the same items, bit for bit.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from fixed_weights import FixedWeights
import vector_actor_check

TASK = "cartpole:swingup"
SEEDS = [11, 22, 33]
TIME_LIMITS = [37, 40, 45]
INDICES = [6, 7, 8]  # the second actor process of a run with 3 environments per actor


def _setup():
    from rlplat_agents.d4pg.networks import policy_template
    from rlplat_agents.d4pg.builder import D4PGBuilder
    from rlplat_agents.d4pg.config import D4PGConfig
    import rlplat_envs as envs
    from rlplat import specs
    from rlplat.utils import numpy_layers

    builder = D4PGBuilder(config=D4PGConfig(policy_layer_sizes=(32, 32), sigma=0.5, n_step=3),
                          sigma_schedule="log", sigma_min=0.05)
    with envs.make_environment(TASK, seed=0) as env:
        spec = specs.make_environment_spec(env)
    rng = np.random.default_rng(7)
    arrays = [rng.normal(0, 0.3, a.shape).astype(np.float32)
              for op in policy_template(spec, builder.config.policy_layer_sizes) for a in numpy_layers.op_arrays(op)]
    return builder, spec, FixedWeights(arrays)


def _run(vector, builder, spec, source, loop_steps):
    return vector_actor_check.record(builder, spec, source, vector=vector, task=TASK, seeds=SEEDS,
                                     time_limits=TIME_LIMITS, indices=INDICES, loop_steps=loop_steps)


@pytest.mark.slow
def test_the_vector_actor_writes_what_k_separate_actors_write():
    from rlplat.gaussian_actor import GaussianVectorActor

    builder, spec, source = _setup()
    steps = len(SEEDS) * 100 + 1  # episodes end in every stream; a last partial round
    separate_stats, separate = _run(False, builder, spec, source, steps)
    vector_stats, vector = _run(True, builder, spec, source, steps)
    assert isinstance(builder.make_vector_actor(spec, source, None, SEEDS), GaussianVectorActor)
    assert vector_stats["episodes"] == separate_stats["episodes"] >= 6
    assert vector_stats["episode_returns"] == separate_stats["episode_returns"]
    assert len(vector) >= steps - 3 * 2
    vector_actor_check.assert_same_items(separate, vector)
    # The environments' noise scales differ (actor indices 6..8 under the log schedule).
    assert len({builder.actor_sigma(i) for i in INDICES}) == 3


def test_unpacked_transitions_get_no_vector_actor():
    import dataclasses

    builder, spec, source = _setup()
    unpacked = dataclasses.replace(builder, pack_transitions=False)
    assert unpacked.make_vector_actor(spec, source, None, SEEDS) is None
