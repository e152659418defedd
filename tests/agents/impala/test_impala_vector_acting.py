"""IMPALAVectorActor writes, stream by stream, the items of K separate IMPALAActors and SequenceAdders.

Both runs step the same K environments through ``VectorEnvironmentLoop`` (so
the policy outputs come from the same batched call and may be compared
exactly): the reference with K ``IMPALAActor``s (seeded as the vector
actor's environments), each writing through its own ``SequenceAdder`` to a
queue of its own; the vector actor through one ``BatchSequenceAdder`` into
one queue. That queue must be a merge of the K reference queues, item by
item, every field equal. Real Reverb server, real environments.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from fixed_weights import FixedWeights

K = 3
SEEDS = [11, 22, 33]


def _setup(task, unroll_length):
    import reverb

    import rlplat_envs as envs
    from rlplat_agents.impala import networks
    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig
    from rlplat import specs
    from rlplat.replay import server as replay_server
    from rlplat.replay import tables

    builder = IMPALABuilder(config=IMPALAConfig(unroll_length=unroll_length, layer_sizes=(16,),
                                                queue_size=5000))
    with envs.make_environment(task, seed=0) as env:
        spec = specs.make_environment_spec(env)
    network = networks.make_network(spec, builder.config)
    rng = np.random.default_rng(5)
    # Random weights large enough that the policy is far from uniform (and not trivial).
    arrays = [np.asarray(v.numpy()) + rng.normal(0, 0.3, v.shape).astype(np.float32)
              if "kernel" in v.name else np.asarray(v.numpy()) for v in networks.acting_variables(network)]
    signature = builder.signature(spec)
    queues = [builder.replay_table] + [f"stream_{k}" for k in range(K)]
    server = replay_server.make_server([tables.make_queue_table(name, 5000, signature) for name in queues])
    return builder, spec, FixedWeights(arrays), server, reverb.Client(f"127.0.0.1:{server.port}")


def _drain(client, table):
    from rlplat.replay.sequence_signature import as_sequence_step

    size = client.server_info(timeout=5)[table].current_size
    if not size:
        return []
    return [as_sequence_step(s.data) for s in client.sample(table, num_samples=size, emit_timesteps=False,
                                                            unpack_as_table_signature=True)]


def _equal(a, b):
    import tree

    return all(x.dtype == y.dtype and np.array_equal(x, y)
               for x, y in zip(map(np.asarray, tree.flatten(a)), map(np.asarray, tree.flatten(b))))


def _run(task, builder, spec, source, client, loop_steps, vector):
    import rlplat_envs as envs
    from rlplat.replay.sequence_adder import SequenceAdder
    from rlplat.vector_loop import VectorEnvironmentLoop

    environments = [envs.make_environment(task, seed=s) for s in SEEDS]
    try:
        if vector:
            actor = builder.make_vector_actor(spec, source, client.server_address, SEEDS)
            closers = [actor]
        else:
            closers = [SequenceAdder(client, f"stream_{k}", builder.config.unroll_length,
                                     signature=builder.signature(spec)) for k in range(K)]
            actor = [builder.make_actor(spec, source, adder, k, s) for k, (adder, s) in enumerate(zip(closers, SEEDS))]
        loop = VectorEnvironmentLoop(environments, actor)
        stats = loop.run_steps(loop_steps)
        for closer in closers:
            closer.close()
        return stats
    finally:
        for env in environments:
            env.close()


@pytest.mark.slow
@pytest.mark.parametrize("task, unroll_length, steps_per_env", [
    ("gym:CartPole-v1", 10, 400),  # discrete; terminations, mostly mid-unroll
    ("cartpole:swingup", 7, 1100),  # continuous (tanh); 1000-step episodes end in truncation, mid-unroll
])
def test_vector_actor_writes_the_items_of_k_separate_actors(task, unroll_length, steps_per_env):
    builder, spec, source, server, client = _setup(task, unroll_length)
    try:
        loop_steps = K * steps_per_env + 2  # ends with a partial round
        separate = _run(task, builder, spec, source, client, loop_steps, vector=False)
        vector = _run(task, builder, spec, source, client, loop_steps, vector=True)
        assert vector["episode_returns"] == separate["episode_returns"]
        streams = [_drain(client, f"stream_{k}") for k in range(K)]
        merged = _drain(client, builder.replay_table)
        assert len(merged) == sum(map(len, streams)) and min(map(len, streams)) >= 5
        # The vector queue must be an interleaving of the K streams, each in its own order.
        heads = [0] * K
        for i, item in enumerate(merged):
            owners = [k for k in range(K) if heads[k] < len(streams[k]) and _equal(item, streams[k][heads[k]])]
            assert owners, f"vector item {i} is not the next item of any stream (heads {heads})"
            heads[owners[0]] += 1
        assert heads == [len(s) for s in streams]
        # What the run covered: full unrolls, and episode ends of the expected kind.
        ends = [item for s in streams for item in s if item.mask.sum() < unroll_length + 1]
        assert len(ends) >= K
        last_discounts = {float(item.discount[int(item.mask.sum()) - 1]) for item in ends}
        assert last_discounts == ({0.0} if task.startswith("gym") else {1.0})
        assert any(item.mask.sum() == unroll_length + 1 for s in streams for item in s)
    finally:
        server.stop()


def test_lstm_core_has_no_vector_actor():
    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig

    assert IMPALABuilder(config=IMPALAConfig(core="lstm")).make_vector_actor(None, None, None, SEEDS) is None
