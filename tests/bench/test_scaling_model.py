"""bench/scaling.py: the cluster model's weights and lag, and the link model, against hand-worked numbers."""

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")
sys.path.insert(0, BENCH)

import scaling  # noqa: E402

BASE = {"env_steps_per_s": 800.0, "learner_steps_per_s": 100.0, "policy_lag_median": 12.0, "cap_mbit": 1000,
        "samples_per_insert": 4, "batch_size": 32, "publish_period": 20, "version_bytes": 10**6,
        "versions_published": 125, "max_actor_steps": 20_000,
        "actors_per_node": {"a": 2, "b": 2}, "rx_bytes": {"a": 3 * 2**20, "b": 5 * 2**20}}


def test_a_link_full_of_weights_sets_the_pace_and_the_learner_slows_with_it():
    # 8 Mbit/s = 1e6 B/s. 125 versions of 1 MB in 20,000 env steps (4 samples per insert, batch 32,
    # a version every 20 learner steps): 6,250 B of weights per env step on each node's link.
    # The link alone: 0.8 * 1e6 / 6250 = 128 env steps/s; with the cores' 800: 1/sqrt(1/800^2 + 1/128^2).
    per_node = scaling.link_model(BASE, 8, per_node=True, share=0.8)
    assert per_node["weight_bytes_per_env_step"] == pytest.approx(6250)
    assert per_node["link_ceiling_env_steps_per_s"] == pytest.approx(128)
    assert per_node["link_binds_weights"] and per_node["env_steps_per_s"] == pytest.approx(126.39, abs=0.01)
    assert per_node["learner_steps_per_s"] == pytest.approx(100 * 126.39 / 800, abs=0.01)
    # Once per actor, two actors a node: twice the bytes per env step, half the link's pace.
    per_actor = scaling.link_model(BASE, 8, per_node=False, share=0.8)
    assert per_actor["env_steps_per_s"] == pytest.approx(63.80, abs=0.01)
    # The learner waits with the actors: no extra lag; every version still reaches every node.
    assert per_node["lag_learner_steps"] == 12.0 and per_node["rx_bytes_per_node"] == 4 * 2**20
    # A link wide enough leaves the run at its compute-bound rate.
    wide = scaling.link_model(BASE, 10_000, per_node=True, share=0.8)
    assert not wide["link_binds_weights"] and wide["env_steps_per_s"] == pytest.approx(800, rel=1e-3)


def test_the_fitted_share_reproduces_the_run_it_was_fitted_on():
    run = {"cap_mbit": 8, "env_steps_per_s": 120.0}
    share = scaling.fit_share(BASE, run, per_node=True)
    assert share == pytest.approx((120 ** -2 - 800 ** -2) ** -0.5 * 6250 / 1e6)
    assert scaling.link_model(BASE, 8, per_node=True, share=share)["env_steps_per_s"] == pytest.approx(120.0)
    with pytest.raises(ValueError, match="does not bind"):
        scaling.fit_share(BASE, {"cap_mbit": 8, "env_steps_per_s": 800.0}, per_node=True)


def test_cluster_model_counts_the_weights_as_bytes_per_env_step_on_the_learners_nic():
    costs = {"actor_env_steps_per_cpu_s": 1000.0, "replay_inserts_per_s_per_server_core": 10**6,
             "learner_steps_per_s": {"gpu": 1000.0}, "batch": 256, "samples_per_insert": 32.0,
             "item_bytes": 100, "policy_bytes": 10**6}
    # 1 Gbit/s = 1.25e8 B/s. Per env step: data 100 * 33 = 3,300 B; weights, a version every learner
    # step (1/8 of a version per env step) to 4 nodes: 500,000 B. The NIC carries 248 env steps/s.
    row = scaling.model(costs, nodes=4, cores=16, servers=1, learner="gpu", nic_gbit=1.0)
    assert row["ceilings"]["network"] == pytest.approx(1.25e8 / (3300 + 500_000))
    assert row["bottleneck"] == "network" and row["weights_bind"]
    assert row["env_steps_per_s"] == pytest.approx(1.25e8 / 503_300) and row["lag_learner_steps"] == 1
    # Every 1000 learner steps: 500 B of weights per env step; the learner's 8,000 env steps/s fit.
    row = scaling.model(costs, nodes=4, cores=16, servers=1, learner="gpu", nic_gbit=1.0, publish_period=1000)
    assert row["bottleneck"] == "learner" and row["env_steps_per_s"] == pytest.approx(8000)
    assert not row["weights_bind"] and row["lag_learner_steps"] == 1000
    # Once per actor (64 of them): 16 times the weights of once per node.
    row = scaling.model(costs, nodes=4, cores=16, servers=1, learner="gpu", nic_gbit=1.0, publish_period=1000,
                        per_node=False)
    assert row["ceilings"]["network"] == pytest.approx(1.25e8 / (3300 + 8000))


def test_the_replay_ceiling_is_one_core_per_server_over_the_cpu_per_insert_slope():
    import json

    import scaling_calibration

    runs = [{"cap_mbit": cap, "samples_per_insert": 4, "batch_size": 32,
             "replay": {"inserts_per_s": rate, "server_cores": 0.03 + 20e-6 * rate, "sampled_items_per_s": 4 * rate,
                        "servers": 2}}
            for cap, rate in ((1000, 3000.0), (40, 2000.0), (10, 1000.0))]
    ceiling = scaling_calibration.replay_ceiling(runs)
    assert ceiling["cpu_us_per_insert"] == pytest.approx(20.0)
    assert ceiling["idle_server_cores"] == pytest.approx(0.03)
    assert ceiling["measured_inserts_per_s"] == pytest.approx(2 * 50_000)
    # The model's: per sampled item a + c / 16 (a batch of 32 over 2 servers), a and c through the
    # costs measured at 16 and 256 items per call; per insert their mean.
    costs = {}
    for b in (16, 256):
        with open(os.path.join(BENCH, "results", f"replay_capacity_b{b}.json")) as f:
            costs[b] = json.load(f)["capacity"]
    s16, s256 = (costs[b]["server_cpu_us_per_sampled_item"] for b in (16, 256))
    c = (s16 - s256) / (1 / 16 - 1 / 256)
    assert s256 - c / 256 + c / 16 == pytest.approx(s16)  # at 16 items per call: the measured cost
    insert = (costs[16]["server_cpu_us_per_insert"] + costs[256]["server_cpu_us_per_insert"]) / 2
    per_core = 1e6 / (insert + 4 * s16)
    assert ceiling["model_inserts_per_s"] == pytest.approx(2 * per_core)
    assert ceiling["within_25pct"] == (abs(50_000 - per_core) <= 0.25 * 50_000)
    assert scaling_calibration.replay_ceiling(runs[:1]) is None  # one rate gives no slope
