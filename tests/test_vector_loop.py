"""A vectorised actor writes the transitions of K separate actors (real MuJoCo, real Reverb)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from fixed_weights import FixedWeights

TASK = "cartpole:swingup"
K = 3
STEPS_PER_ENV = 120


def _server(builder, spec):
    """The agent's tables; D4PG's uniform table becomes FIFO, sampled once, so every item is read once
    (IMPALA's queue already is)."""
    import reverb

    from rlplat.replay import server as replay_server

    tables = builder.make_replay_tables(spec, K)
    if builder.__class__.__name__ == "D4PGBuilder":
        tables = [t.replace(sampler=reverb.selectors.Fifo(), remover=reverb.selectors.Fifo(),
                            max_times_sampled=1, rate_limiter=reverb.rate_limiters.MinSize(1)) for t in tables]
    return replay_server.make_server(tables)


def _items(server, table):
    """Every item in the table, each flattened to one vector."""
    import reverb

    client = reverb.Client(f"127.0.0.1:{server.port}")
    size = client.server_info()[table].current_size
    # The legacy sample API splits an item's first dimension into "timesteps".
    return np.stack([np.concatenate([np.ravel(np.asarray(x, np.float64)) for row in item for x in row.data])
                     for item in client.sample(table, num_samples=size)])


def _run(vectorised, task, builder, spec, seeds, source, loop_steps):
    import rlplat_envs as envs
    from rlplat.environment_loop import EnvironmentLoop
    from rlplat.vector_loop import VectorEnvironmentLoop

    server = _server(builder, spec)
    address = f"127.0.0.1:{server.port}"
    environments = [envs.make_environment(task, seed=s) for s in seeds]
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


def _d4pg(task):
    from rlplat_agents.d4pg.networks import policy_template
    from rlplat_agents.d4pg.builder import D4PGBuilder
    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat.utils import numpy_layers

    builder = D4PGBuilder(config=D4PGConfig(policy_layer_sizes=(32, 32), sigma=0.3))
    spec = _spec(task)
    rng = np.random.default_rng(7)
    arrays = [rng.normal(0, 0.3, a.shape).astype(np.float32)
              for op in policy_template(spec, builder.config.policy_layer_sizes) for a in numpy_layers.op_arrays(op)]
    return builder, spec, arrays


def _impala(task):
    from rlplat_agents.impala import networks
    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig

    builder = IMPALABuilder(config=IMPALAConfig(unroll_length=10, layer_sizes=(16,)))
    spec = _spec(task)
    network = networks.make_network(spec, builder.config)
    return builder, spec, [v.numpy() for v in networks.acting_variables(network)]


def _spec(task):
    import rlplat_envs as envs
    from rlplat import specs

    with envs.make_environment(task, seed=0) as env:
        return specs.make_environment_spec(env)


@pytest.mark.slow
@pytest.mark.parametrize("agent, task", [("d4pg", "cartpole:swingup"), ("impala", "gym:CartPole-v1"),
                                         ("impala", "cartpole:swingup")])
def test_k_environments_in_one_actor_write_what_k_separate_actors_write(agent, task):
    builder, spec, arrays = (_d4pg if agent == "d4pg" else _impala)(task)
    source = FixedWeights(arrays)
    seeds = [11, 22, 33]
    separate = _run(False, task, builder, spec, seeds, source, K * STEPS_PER_ENV)
    vector = _run(True, task, builder, spec, seeds, source, K * STEPS_PER_ENV)
    assert separate.shape == vector.shape and len(vector) >= K * 10
    # Same multiset of items (the streams interleave differently): each vector
    # item matches exactly one separate item, up to float32 round-off (one
    # matrix product for K rows sums in another order than K vector products).
    distance = np.abs(vector[:, None, :] - separate[None, :, :]).max(axis=-1)
    nearest = distance.argmin(axis=1)
    assert distance[np.arange(len(vector)), nearest].max() < 1e-3
    assert len(set(nearest.tolist())) == len(vector)  # one-to-one
    # The streams really differ from each other (their own seeds and noise).
    assert np.unique(np.round(vector[:, 0], 4)).size > len(vector) // 2


@pytest.mark.slow
def test_a_partial_round_steps_the_first_environments_and_counts_every_step():
    import rlplat_envs as envs
    from rlplat.vector_loop import VectorEnvironmentLoop

    builder, spec, arrays = _d4pg(TASK)
    environments = [envs.make_environment(TASK, seed=s) for s in range(K)]
    source = FixedWeights(arrays)
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
