"""bench/scaling.py: the cluster model's weights and lag, and the link model, against hand-worked numbers."""

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
sys.path.insert(0, BENCH)

import scaling  # noqa: E402

BASE = {"env_steps_per_s": 800.0, "learner_steps_per_s": 100.0, "policy_lag_median": 12.0, "cap_mbit": 1000,
        "samples_per_insert": 4, "batch_size": 32, "publish_period": 20, "version_bytes": 10**6,
        "actors_per_node": {"a": 2, "b": 2}, "rx_bytes": {"a": 3 * 2**20, "b": 5 * 2**20}}


def test_a_link_full_of_weights_slows_the_run_by_the_stalled_share_of_each_transfer():
    # 8 Mbit/s = 1e6 B/s: a 1 MB version takes 1 s per copy; at 800 env steps/s the learner
    # (4 samples per insert, batch 32) takes 100 steps/s and publishes 5 versions/s: 5 link-seconds/s.
    per_node = scaling.link_model(BASE, 8, per_node=True, stall=0.5)
    assert per_node["link_busy_at_base_rate"] == pytest.approx(5.0)
    assert per_node["env_steps_per_s"] == pytest.approx(800 / (1 + 0.5 * 5))
    assert per_node["learner_steps_per_s"] == pytest.approx(100 / 3.5)
    # Once per actor, two actors a node: twice the link-seconds.
    per_actor = scaling.link_model(BASE, 8, per_node=False, stall=0.5)
    assert per_actor["env_steps_per_s"] == pytest.approx(800 / (1 + 0.5 * 10))
    # The learner waits with the actors: no extra lag; every version still reaches every node.
    assert per_node["lag_learner_steps"] == 12.0 and per_node["rx_bytes_per_node"] == 4 * 2**20
    # A wide link leaves the run as it was.
    assert scaling.link_model(BASE, 10**6, per_node=True, stall=0.5)["env_steps_per_s"] == pytest.approx(800, rel=1e-3)


def test_the_fitted_stall_reproduces_the_run_it_was_fitted_on():
    run = {"cap_mbit": 8, "env_steps_per_s": 320.0}
    stall = scaling.fit_stall(BASE, run, per_node=True)
    assert stall == pytest.approx((800 / 320 - 1) / 5)
    assert scaling.link_model(BASE, 8, per_node=True, stall=stall)["env_steps_per_s"] == pytest.approx(320.0)


def test_cluster_model_sends_what_the_data_leaves_and_reports_the_lag():
    costs = {"actor_env_steps_per_cpu_s": 1000.0, "replay_inserts_per_s_per_server_core": 10**6,
             "learner_steps_per_s": {"gpu": 1000.0}, "batch": 256, "samples_per_insert": 32.0,
             "item_bytes": 100, "policy_bytes": 10**6}
    # 1 Gbit/s = 1.25e8 B/s. Learner-bound at 1000 * 256 / 32 = 8000 env steps/s; data 8000 * 100 * 33
    # = 2.64e7 B/s leaves 9.86e7 B/s. 1000 versions/s published, 4 nodes: 98.6 versions/s reach each.
    row = scaling.model(costs, nodes=4, cores=16, servers=1, learner="gpu", nic_gbit=1.0)
    assert row["bottleneck"] == "learner" and row["env_steps_per_s"] == pytest.approx(8000)
    assert row["versions_per_s_per_node"] == pytest.approx((1.25e8 - 2.64e7) / (4 * 10**6))
    assert row["nic_binds_weights"] and row["lag_learner_steps"] == pytest.approx(1000 / 24.65)
    # Every 100 learner steps: 10 versions/s fit, and the lag is the period.
    row = scaling.model(costs, nodes=4, cores=16, servers=1, learner="gpu", nic_gbit=1.0, publish_period=100)
    assert not row["nic_binds_weights"] and row["lag_learner_steps"] == pytest.approx(100)
