"""A vectorised actor writes the transitions of K separate actors (real MuJoCo, real Reverb)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

TASK = "cartpole:swingup"
K = 3
STEPS_PER_ENV = 120


class _FixedWeights:
    """A variable source that always serves the same policy weights (version 1)."""

    def __init__(self, arrays):
        self._arrays = arrays

    def get_variables(self, names):
        return 1, {"policy": self._arrays}


def _fifo_server(builder, spec):
    import reverb

    from rlplat.replay import server as replay_server

    (table,) = builder.make_replay_tables(spec, K)
    table = table.replace(sampler=reverb.selectors.Fifo(), remover=reverb.selectors.Fifo(),
                          max_times_sampled=1, rate_limiter=reverb.rate_limiters.MinSize(1))
    return replay_server.make_server([table])


def _items(server, table):
    import reverb

    client = reverb.Client(f"127.0.0.1:{server.port}")
    size = client.server_info()[table].current_size
    # The legacy sample API splits an item's first dimension into "timesteps":
    # a packed transition of D floats comes back as D one-float rows.
    return np.stack([np.array([row.data[0] for row in item], np.float32)
                     for item in client.sample(table, num_samples=size)])


def _run(vectorised, builder, spec, seeds, source, loop_steps):
    import envs
    from rlplat.environment_loop import EnvironmentLoop
    from rlplat.vector_loop import VectorEnvironmentLoop

    server = _fifo_server(builder, spec)
    address = f"127.0.0.1:{server.port}"
    environments = [envs.make_environment(TASK, seed=s) for s in seeds]
    adders = [builder.make_adder(address, spec) for _ in seeds]
    actors = [builder.make_actor(spec, source, adder, j, s) for j, (adder, s) in enumerate(zip(adders, seeds))]
    try:
        if vectorised:
            stats = VectorEnvironmentLoop(environments, actors).run_steps(loop_steps)
            assert stats["env_steps"] == loop_steps and stats["num_environments"] == K
        else:
            for env, actor in zip(environments, actors):
                EnvironmentLoop(env, actor).run_steps(loop_steps // K)
        for adder in adders:
            adder.close()
        return _items(server, builder.replay_table)
    finally:
        for env in environments:
            env.close()
        server.stop()


@pytest.mark.slow
def test_k_environments_in_one_actor_write_what_k_separate_actors_write():
    import envs
    from agents.d4pg.acting import policy_template
    from agents.d4pg.builder import D4PGBuilder
    from agents.d4pg.config import D4PGConfig
    from rlplat import specs
    from rlplat.utils import numpy_layers

    builder = D4PGBuilder(config=D4PGConfig(policy_layer_sizes=(32, 32), sigma=0.3))
    with envs.make_environment(TASK, seed=0) as env:
        spec = specs.make_environment_spec(env)
    template = policy_template(spec, builder.config.policy_layer_sizes)
    rng = np.random.default_rng(7)
    arrays = [rng.normal(0, 0.3, a.shape).astype(np.float32)
              for op in template for a in numpy_layers.op_arrays(op)]
    source = _FixedWeights(arrays)
    seeds = [11, 22, 33]

    separate = _run(False, builder, spec, seeds, source, K * STEPS_PER_ENV)
    vector = _run(True, builder, spec, seeds, source, K * STEPS_PER_ENV)
    # n-step items: the last n - 1 steps of an unfinished episode write none.
    num_items = K * (STEPS_PER_ENV - builder.config.n_step + 1)
    assert separate.shape == vector.shape and len(vector) == num_items
    # Same multiset of transitions (the streams interleave differently): each
    # vector item matches exactly one separate item, up to float32 round-off
    # (one matrix product for K rows sums in another order than K vector products).
    distance = np.abs(vector[:, None, :] - separate[None, :, :]).max(axis=-1)
    nearest = distance.argmin(axis=1)
    assert distance[np.arange(len(vector)), nearest].max() < 1e-3
    assert len(set(nearest.tolist())) == len(vector)  # one-to-one
    # Exploration noise was on, and the streams really differ from each other.
    assert np.unique(np.round(vector[:, 0], 4)).size > num_items // 2


@pytest.mark.slow
def test_a_partial_round_steps_the_first_environments_and_counts_every_step():
    import envs
    from agents.d4pg.builder import D4PGBuilder
    from agents.d4pg.config import D4PGConfig
    from rlplat import specs
    from rlplat.vector_loop import VectorEnvironmentLoop

    builder = D4PGBuilder(config=D4PGConfig(policy_layer_sizes=(8,)))
    environments = [envs.make_environment(TASK, seed=s) for s in range(K)]
    spec = specs.make_environment_spec(environments[0])
    from agents.d4pg.acting import policy_template
    from rlplat.utils import numpy_layers

    template = policy_template(spec, (8,))
    source = _FixedWeights([a for op in template for a in numpy_layers.op_arrays(op)])
    actors = [builder.make_actor(spec, source, None, j, j) for j in range(K)]
    loop = VectorEnvironmentLoop(environments, actors)
    stats = loop.run_steps(7)  # two full rounds of 3, then environment 0 alone
    assert stats["env_steps"] == 7 and loop.total_steps == 7
    assert [inner.total_steps for inner in loop._loops] == [3, 2, 2]
    assert stats["policy_version"] == 1
    for env in environments:
        env.close()


def test_actors_without_batch_acting_are_refused_with_the_fix():
    from rlplat.vector_loop import VectorEnvironmentLoop

    class _OneAtATime:
        pass

    with pytest.raises(TypeError, match="run one environment per actor"):
        VectorEnvironmentLoop([object(), object()], [_OneAtATime(), _OneAtATime()])
    with pytest.raises(ValueError, match="one actor per environment"):
        VectorEnvironmentLoop([object()], [])
