"""Records what an agent's actors write for K environments: K ``make_actor`` actors or one ``make_vector_actor``.

Both ways step the same K environments (seeded alike, episodes cut at the
given lengths so they end out of step) through ``VectorEnvironmentLoop``:
K ``make_actor`` actors, each with its own ``make_adder`` adder (the loop
makes one batched policy call for them, so their outputs may be compared
exactly), or the builder's one vector actor. Items go to a real Reverb
server (a FIFO copy of the builder's table) and are read back once each.
"""

import numpy as np


def record(builder, spec, source, *, vector, task, seeds, time_limits, indices, loop_steps):
    """(loop stats, items [N, D] read back from the table) of ``loop_steps`` loop steps."""
    import reverb

    import rlplat_envs as envs
    from rlplat.replay import server as replay_server
    from rlplat.vector_loop import VectorEnvironmentLoop

    tables = [t.replace(sampler=reverb.selectors.Fifo(), remover=reverb.selectors.Fifo(), max_times_sampled=1,
                        rate_limiter=reverb.rate_limiters.MinSize(1)) for t in builder.make_replay_tables(spec, 1)]
    (table,) = tables
    server = replay_server.make_server(tables)
    address = f"127.0.0.1:{server.port}"
    environments = [envs.make_environment(task, seed=s, time_limit=t) for s, t in zip(seeds, time_limits)]
    try:
        if vector:
            actor = builder.make_vector_actor(spec, source, address, seeds, actor_indices=indices)
            closers = [actor]
            stats = VectorEnvironmentLoop(environments, actor).run_steps(loop_steps)
        else:
            closers = [builder.make_adder(address, spec) for _ in seeds]
            actors = [builder.make_actor(spec, source, adder, i, s) for adder, i, s in zip(closers, indices, seeds)]
            stats = VectorEnvironmentLoop(environments, actors).run_steps(loop_steps)
        for closer in closers:
            closer.close()
        client = reverb.Client(address)
        size = client.server_info(timeout=5)[table.name].current_size
        items = np.stack([np.asarray(s.data[0]) for s in client.sample(table.name, num_samples=size,
                                                                         emit_timesteps=False)])
        return stats, items
    finally:
        for env in environments:
            env.close()
        server.stop()


def assert_same_items(separate, vector):
    """The same items, every bit (streams interleave differently in the table, so compared as sorted sets)."""
    assert separate.shape == vector.shape, (separate.shape, vector.shape)
    np.testing.assert_array_equal(vector[np.lexsort(vector.T[::-1])], separate[np.lexsort(separate.T[::-1])])
