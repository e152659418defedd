"""The control-suite bench's scoring: scores at 100k/500k, steps to 0.9x published, the table."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import d4pg_learning  # noqa: E402
from bench import d4pg_suite  # noqa: E402
from bench import learning_table  # noqa: E402
from bench import seeds  # noqa: E402


def _record(seed, returns, every=20_000, seconds_per_step=0.002, task="walker:walk"):
    curve = [{"actor_steps": every * (i + 1), "seconds": every * (i + 1) * seconds_per_step,
              "eval_return": float(r)} for i, r in enumerate(returns)]
    settings = {"env": task, "target": None, "max_actor_steps": every * len(returns)}
    return {"seed": seed, "eval_curve": curve, "total_wall_seconds": curve[-1]["seconds"] + 5,
            "env_steps_per_s": 400.0, "machine": {"cpu_model": "cpu X", "cpus": 2},
            "settings": settings, "variant": f"default-{task.replace(':', '_')}"}


def test_score_is_the_mean_of_the_last_three_evaluations_up_to_the_step():
    curve = _record(0, range(100, 2600, 100))["eval_curve"]  # 25 evals, 20k..500k
    # Up to 100k: the evals at 60k, 80k, 100k (300, 400, 500).
    assert d4pg_suite.score_at(curve, 100_000) == pytest.approx(400.0)
    assert d4pg_suite.score_at(curve, 500_000) == pytest.approx((2300 + 2400 + 2500) / 3)
    # A run that stopped far short of 500k has no 500k score.
    assert d4pg_suite.score_at(curve[:10], 500_000) is None
    assert d4pg_suite.score_at([], 100_000) is None


def test_summary_against_curl_state_sac():
    # walker:walk: State SAC 948 at 500k (bar 0.9 x 948 = 853.2), 891 at 100k.
    good = _record(0, [300, 500, 700, 800, 850] + [860] * 19 + [900])
    bad = _record(1, [100] * 25)
    summary = d4pg_suite.task_summary("walker:walk", [good, bad])
    assert summary["bar"] == pytest.approx(853.2)
    s500 = summary["scores"]["500000"]
    assert s500["published_mean"] == 948.0 and s500["published_std"] == 54.0
    assert s500["mean"] == pytest.approx(((860 + 860 + 900) / 3 + 100) / 2)
    assert s500["ratio"] == pytest.approx(s500["mean"] / 948.0)
    assert s500["meets_target"] is False
    s100 = summary["scores"]["100000"]
    assert s100["mean"] == pytest.approx(((700 + 800 + 850) / 3 + 100) / 2)
    seeds_ = {p["seed"]: p for p in summary["per_seed"]}
    assert seeds_[0]["steps_to_bar"] == 120_000  # 860 at the 6th eval
    assert seeds_[0]["seconds_to_bar"] == pytest.approx(240.0)
    assert seeds_[1]["steps_to_bar"] is None
    only_good = d4pg_suite.task_summary("walker:walk", [good])
    assert only_good["scores"]["500000"]["meets_target"] is True


def test_frontier_tasks_use_the_weaker_source_and_unknown_tasks_none():
    refs, source = d4pg_suite.published("walker:run")
    assert 500_000 in refs and source == d4pg_suite.TDMPC2_SAC
    assert d4pg_suite.published("cartpole:swingup")[1] == d4pg_suite.CURL
    summary = d4pg_suite.task_summary("acrobot:swingup", [_record(0, [10] * 25, task="acrobot:swingup")])
    assert summary["bar"] is None and summary["scores"]["500000"]["ratio"] is None


def test_a_published_score_of_an_agent_that_failed_the_task_gets_no_ratio_or_bar():
    # hopper:stand's published state SAC is 0.8 of 1,000: 0.9x that is no bar, and 600/0.8 no ratio.
    summary = d4pg_suite.task_summary("hopper:stand", [_record(0, [600] * 25, task="hopper:stand")])
    s500 = summary["scores"]["500000"]
    assert s500["published_mean"] == 0.8 and s500["mean"] == 600.0
    assert s500["ratio"] is None and s500["meets_target"] is None and s500["published_fails_task"]
    assert summary["bar"] is None and summary["per_seed"][0]["steps_to_bar"] is None
    assert learning_table._ratio(s500) == "- (published fails the task)"  # pylint: disable=protected-access
    walker = d4pg_suite.task_summary("walker:run", [_record(0, [600] * 25, task="walker:run")])
    assert walker["scores"]["500000"]["ratio"] == pytest.approx(600 / 604.1)
    assert not walker["scores"]["500000"]["published_fails_task"]


def test_report_and_table_come_from_the_records(tmp_path):
    out = str(tmp_path)
    for seed, final in ((0, 900), (1, 880)):
        record = _record(seed, [400] * 22 + [final] * 3, task="cartpole:swingup")
        path = seeds.run_path(out, d4pg_suite.BENCH, record["variant"], seed)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(record, f)
    report = d4pg_suite.write_report(out)
    entry = report["variants"]["default"]["cartpole:swingup"]
    assert entry["scores"]["500000"]["mean"] == pytest.approx(890.0)
    assert os.path.exists(os.path.join(out, "d4pg_suite.png"))
    lines = learning_table.suite_section(os.path.join(out, "d4pg_suite.json"))
    row = next(line for line in lines if line.startswith("| cartpole:swingup"))
    assert "848 ± 15" in row and "890 ± 10 (2)" in row and "1.05 ✓" in row
    assert "460k, 460k" in row  # the 23rd eval is the first >= 0.9 x 848 = 763.2
    assert any("CURL" in line for line in lines)
    # D4PG's own published figure (PlaNet's Table 1, from pixels) beside the state-SAC one, cited.
    assert "| 862 (pixels, 1e9 steps) [1] |" in row and any("PlaNet" in line for line in lines)


def test_a_variant_row_names_its_runner_and_overrides():
    plain = {"num_actors": 2, "overrides": {}}
    assert learning_table._suite_variant("default", plain) == "default"  # pylint: disable=protected-access
    local = {"runner": "local", "num_actors": 1, "overrides": {"sigma": 0.2, "n_step": 3}}
    assert (learning_table._suite_variant("local", local)  # pylint: disable=protected-access
            == "local (local runner, 1 actor(s) in one process; n_step=3; sigma=0.2)")


def test_a_record_made_under_earlier_defaults_says_so(tmp_path):
    from rlplat_agents.d4pg.config import D4PGConfig

    today = json.loads(json.dumps(D4PGConfig().to_dict()))
    then = dict(today, critic_learning_rate=today["critic_learning_rate"] * 3, sigma=0.2)
    # The variant chose sigma itself; only the critic's rate was a default that has since changed.
    settings = {"env": "cartpole:swingup", "overrides": {"sigma": 0.2}, "config": then}
    assert d4pg_learning.earlier_defaults(settings) == {"critic_learning_rate": then["critic_learning_rate"]}
    assert d4pg_learning.earlier_defaults(dict(settings, config=dict(today, sigma=0.2))) == {}
    # Tuples in today's config and lists in a record's JSON are the same value.
    assert d4pg_learning.earlier_defaults({"overrides": {}, "config": today}) == {}
    out = str(tmp_path)
    record = _record(0, [400] * 25, task="cartpole:swingup")
    record["settings"].update(overrides={}, config=dict(today, critic_learning_rate=1.0))
    path = seeds.run_path(out, d4pg_suite.BENCH, record["variant"], 0)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f)
    d4pg_suite.write_report(out)
    lines = learning_table.suite_section(os.path.join(out, "d4pg_suite.json"))
    row = next(line for line in lines if line.startswith("| cartpole:swingup"))
    assert "default (earlier defaults critic_learning_rate=1.0)" in row


def _write(out, record):
    path = seeds.run_path(out, d4pg_suite.BENCH, record["variant"], record["seed"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f)


def test_a_rerun_under_new_defaults_keeps_the_earlier_record_and_pools_equal_configs(tmp_path, capsys):
    from rlplat_agents.d4pg.config import D4PGConfig

    out = str(tmp_path)
    today = json.loads(json.dumps(D4PGConfig().to_dict()))
    rate = today["critic_learning_rate"]
    earlier = _record(1, [400] * 25, task="cartpole:swingup")
    earlier["settings"].update(num_actors=2, overrides={}, config=dict(today, critic_learning_rate=rate / 3))
    _write(out, earlier)
    # Seed 0 was recorded under another name, setting what is now the default.
    chosen = _record(0, [800] * 25, task="cartpole:swingup")
    chosen["variant"] = "lr-cartpole_swingup"
    chosen["settings"].update(num_actors=2, overrides={"critic_learning_rate": rate}, config=today)
    _write(out, chosen)
    settings = dict(earlier["settings"], config=today)
    records = seeds.run_seeds(out, d4pg_suite.BENCH, earlier["variant"], [1], settings,
                              lambda s: {"eval_curve": _record(s, [900] * 25)["eval_curve"],
                                         "total_wall_seconds": 1.0, "env_steps_per_s": 1.0})
    assert records[0]["settings"] == settings
    assert "kept as" in capsys.readouterr().out
    kept = seeds.recorded_variants(out, d4pg_suite.BENCH, superseded=True)["default-cartpole_swingup"]
    assert sorted(r["settings"]["config"]["critic_learning_rate"] for r in kept) == [rate / 3, rate]
    assert len(seeds.recorded_variants(out, d4pg_suite.BENCH)["default-cartpole_swingup"]) == 1
    report = d4pg_suite.write_report(out)
    today_row = report["variants"]["default"]["cartpole:swingup"]
    assert [s["seed"] for s in today_row["seeds"]] == [0, 1] and today_row["recorded_as"] == ["lr"]
    assert today_row["scores"]["500000"]["mean"] == pytest.approx(850.0)
    assert today_row["settings"]["overrides"] == {} and today_row["earlier_defaults"] == {}
    then_row = report["variants"]["default #2"]["cartpole:swingup"]
    assert then_row["earlier_defaults"] == {"critic_learning_rate": rate / 3}
    assert then_row["scores"]["500000"]["mean"] == pytest.approx(400.0)
    lines = learning_table.suite_section(os.path.join(out, "d4pg_suite.json"))
    rows = [line for line in lines if line.startswith("| cartpole:swingup")]
    assert "default (recorded as lr, the same config)" in rows[0] and "earlier defaults" in rows[1]


def test_a_learning_variant_that_set_what_are_now_the_defaults_is_shown_as_todays_defaults(tmp_path):
    from rlplat_agents.d4pg.config import D4PGConfig

    today = json.loads(json.dumps(D4PGConfig().to_dict()))
    rate = today["critic_learning_rate"]
    out = str(tmp_path)
    for variant, overrides, config in (("lr", {"critic_learning_rate": rate}, today),
                                       ("default", {}, dict(today, critic_learning_rate=rate / 3))):
        record = _record(0, [300, 600, 820], every=40_000, task="cartpole:swingup")
        record["settings"].update(target=800.0, num_actors=2, overrides=overrides)
        record.update(variant=variant, config=config)
        path = seeds.run_path(out, d4pg_learning.BENCH, variant, 0)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(record, f)
    report = d4pg_learning.write_report(out)
    assert report["variants"]["lr"]["todays_defaults"] is True
    assert report["variants"]["default"]["todays_defaults"] is False
    rows = {row["variant"]: row for row in learning_table.rows_from(os.path.join(out, "d4pg_learning.json"))}
    assert rows["lr"]["overrides"] == (f"(none: today's defaults; recorded with critic_learning_rate={rate}, "
                                       "the default now)")
    assert rows["default"]["overrides"] == f"earlier default critic_learning_rate={rate / 3}"
    assert rows["lr"]["to_target"] == "1/1 reached 800; median 120k, worst 120k"
