"""Scale benches: the roofline's FLOP count (by hand, against the traced learner); the replay capacity model."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import learner_roofline  # noqa: E402


def test_tiny_step_is_counted_pass_by_pass():
    # obs 2, action 1, batch 4, one hidden layer of 3 in each net, 2 atoms.
    # policy layers: 2->3, 3->1; critic layers: 3->3, 3->2.
    m = learner_roofline.step_matmuls(2, 1, 4, (3,), (3,), 2)
    policy_fwd = 2 * 4 * (2 * 3 + 3 * 1)          # 72
    critic_fwd = 2 * 4 * (3 * 3 + 3 * 2)          # 120
    # weight grads of every layer + input grads of all but the first
    critic_loss_bwd = 2 * (3 * 4 * 3 + 3 * 4 * 2) + 2 * 4 * 2 * 3   # 120 + 48
    dqda_bwd = 2 * 4 * (3 * 3 + 2 * 3)            # input grads only, first layer too: 120
    policy_bwd = 2 * (2 * 4 * 3 + 3 * 4 * 1) + 2 * 4 * 1 * 3        # 72 + 24
    want = 2 * policy_fwd + 3 * critic_fwd + critic_loss_bwd + dqda_bwd + policy_bwd
    assert learner_roofline.flops(m) == want == 888


@pytest.mark.slow
@pytest.mark.parametrize("obs_size, action_size, precision", [(5, 1, "fp32"), (24, 6, "fp32"), (24, 6, "bf16")])
def test_counted_matmuls_are_the_ones_the_learner_runs(obs_size, action_size, precision):
    import dm_env.specs as dm_specs
    import numpy as np
    import tensorflow as tf

    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat_agents.d4pg.learning import D4PGLearner
    from rlplat import replication, specs

    cfg = D4PGConfig(policy_layer_sizes=(32, 16), critic_layer_sizes=(48, 24, 40), num_atoms=11,
                     global_batch_size=8, precision=precision)
    spec = specs.EnvironmentSpec(
        observations=dm_specs.Array((obs_size,), np.float32),
        actions=dm_specs.BoundedArray((action_size,), np.float32, -1.0, 1.0),
        rewards=dm_specs.Array((), np.float32), discounts=dm_specs.BoundedArray((), np.float32, 0.0, 1.0))
    b = cfg.global_batch_size
    batch = (np.zeros((b, obs_size), np.float32), np.zeros((b, action_size), np.float32),
             np.zeros(b, np.float32), np.zeros(b, np.float32), np.zeros((b, obs_size), np.float32))
    repl = replication.make_replicator(num_replicas=1)
    learner = D4PGLearner(cfg, spec, repl, repl.distribute(tf.data.Dataset.from_tensors(batch).repeat()))
    graph = learner._grads_fn.get_concrete_function(tuple(tf.constant(x) for x in batch)).graph
    traced = learner_roofline.graph_matmuls(graph)
    counted = learner_roofline.step_matmuls(obs_size, action_size, b, cfg.policy_layer_sizes,
                                            cfg.critic_layer_sizes, cfg.num_atoms)
    assert dict(traced) == dict(counted)


def test_replay_capacity_model_from_per_item_costs():
    from bench import replay_capacity

    # 2 runs kept up (1000 inserts cost 0.02 s and 0.03 s of server CPU: 25 us
    # each), one did not and is left out; the sampler cost 1 s for 500k items.
    inserts = [{"achieved_fraction": 1.0, "server_cpu_s": 0.02, "inserted": 1000},
               {"achieved_fraction": 0.99, "server_cpu_s": 0.03, "inserted": 1000},
               {"achieved_fraction": 0.5, "server_cpu_s": 1.0, "inserted": 1000}]
    cap = replay_capacity.capacity(inserts, {"server_cpu_s": 1.0, "sampled": 500_000}, 32.0, 1000.0)
    assert cap["server_cpu_us_per_insert"] == pytest.approx(25.0)
    assert cap["server_cpu_us_per_sampled_item"] == pytest.approx(2.0)
    assert cap["server_cpu_us_per_insert_with_its_samples"] == pytest.approx(25.0 + 64.0)
    assert cap["inserts_per_s_per_server_core"] == pytest.approx(1e6 / 89.0)
    assert cap["d4pg_actors_per_server_core"] == pytest.approx(1e6 / 89.0 / 1000.0)
    # IMPALA: an item is an unroll of 100 env steps, sampled once; 150 us to write, 20 to sample.
    unrolls = [{"achieved_fraction": 1.0, "server_cpu_s": 0.15, "inserted": 1000}]
    cap = replay_capacity.capacity(unrolls, {"server_cpu_s": 0.02, "sampled": 1000}, 1.0, 30_000.0,
                                   env_steps_per_insert=100.0, agent="impala")
    assert cap["inserts_per_s_per_server_core"] == pytest.approx(1e6 / 170.0)
    assert cap["env_steps_per_s_per_server_core"] == pytest.approx(1e8 / 170.0)
    assert cap["impala_actors_per_server_core"] == pytest.approx(1e8 / 170.0 / 30_000.0)


def test_pull_rate_variants_name_period_mode_and_transport():
    from bench import d4pg_pull_rate

    assert d4pg_pull_rate.parse_variant("10") == (10, True, True)
    assert d4pg_pull_rate.parse_variant("10-blocking") == (10, False, True)
    assert d4pg_pull_rate.parse_variant("1000-blocking-ray") == (1000, False, False)
    assert d4pg_pull_rate.parse_variant("100-ray") == (100, True, False)
    for bad in ("0", "x-blocking", "10-fast"):
        with pytest.raises(SystemExit):
            d4pg_pull_rate.parse_variant(bad)
