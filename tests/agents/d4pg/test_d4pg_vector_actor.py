"""D4PG's vector actor acts and records exactly as K separate D4PG actors (real MuJoCo, real Reverb).

Both runs step the same K cartpole environments (seeded alike, episodes cut
at different lengths so they end out of step) through
``VectorEnvironmentLoop``: the reference with K ``make_actor`` actors, each
with its own ``make_adder`` adder (so the policy outputs come from the same
batched call and may be compared exactly), the other with the one
``make_vector_actor`` actor. The "log" sigma schedule gives every
environment its own noise scale, so the actor indices matter too. The two
tables must hold the same items, bit for bit.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from fixed_weights import FixedWeights

TASK = "cartpole:swingup"
SEEDS = [11, 22, 33]
TIME_LIMITS = [37, 40, 45]
INDICES = [6, 7, 8]  # the second actor process of a run with 3 environments per actor


def _setup():
    from rlplat_agents.d4pg.acting import policy_template
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
    import reverb

    import rlplat_envs as envs
    from rlplat.replay import server as replay_server
    from rlplat.vector_loop import VectorEnvironmentLoop

    # FIFO, sampled once: every item is read back exactly once.
    tables = [t.replace(sampler=reverb.selectors.Fifo(), remover=reverb.selectors.Fifo(), max_times_sampled=1,
                        rate_limiter=reverb.rate_limiters.MinSize(1)) for t in builder.make_replay_tables(spec, 1)]
    server = replay_server.make_server(tables)
    address = f"127.0.0.1:{server.port}"
    environments = [envs.make_environment(TASK, seed=s, time_limit=t) for s, t in zip(SEEDS, TIME_LIMITS)]
    try:
        if vector:
            actor = builder.make_vector_actor(spec, source, address, SEEDS, actor_indices=INDICES)
            closers = [actor]
            stats = VectorEnvironmentLoop(environments, actor).run_steps(loop_steps)
        else:
            closers = [builder.make_adder(address, spec) for _ in SEEDS]
            actors = [builder.make_actor(spec, source, adder, i, s) for adder, i, s in zip(closers, INDICES, SEEDS)]
            stats = VectorEnvironmentLoop(environments, actors).run_steps(loop_steps)
        for closer in closers:
            closer.close()
        client = reverb.Client(address)
        size = client.server_info(timeout=5)[builder.replay_table].current_size
        items = np.stack([np.asarray(s.data[0]) for s in client.sample(builder.replay_table, num_samples=size,
                                                                         emit_timesteps=False)])
        return stats, items
    finally:
        for env in environments:
            env.close()
        server.stop()


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
    # Streams interleave differently in the table: compare the items as sorted sets, every bit.
    assert separate.shape == vector.shape and len(vector) >= steps - 3 * 2
    order = np.lexsort(separate.T[::-1])
    np.testing.assert_array_equal(vector[np.lexsort(vector.T[::-1])], separate[order])
    # The environments' noise scales differ (actor indices 6..8 under the log schedule).
    assert len({builder.actor_sigma(i) for i in INDICES}) == 3


def test_unpacked_transitions_get_no_vector_actor():
    import dataclasses

    builder, spec, source = _setup()
    unpacked = dataclasses.replace(builder, pack_transitions=False)
    assert unpacked.make_vector_actor(spec, source, None, SEEDS) is None
