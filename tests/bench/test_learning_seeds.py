"""The learning benches' seed bookkeeping: per-seed records, summaries and the results table."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import learning_table  # noqa: E402
from bench import seeds  # noqa: E402


def _record(seed, returns, every=10_000, seconds_per_step=0.01):
    curve = [{"actor_steps": every * (i + 1), "seconds": every * (i + 1) * seconds_per_step,
              "eval_return": r} for i, r in enumerate(returns)]
    return {"seed": seed, "eval_curve": curve, "total_wall_seconds": curve[-1]["seconds"] + 5,
            "env_steps_per_s": 100.0}


def test_summary_counts_median_worst_and_final_returns():
    records = [_record(0, [100, 500, 820]),            # 30k
               _record(1, [200, 810]),                 # 20k
               _record(2, [50, 100, 300, 700, 790])]  # never: counts as the 200k budget
    summary = seeds.summarise(records, 800.0, 200_000)
    assert summary["reached"] == 2 and summary["num_seeds"] == 3
    assert summary["median_steps_to_target"] == 30_000
    assert summary["worst_steps_to_target"] is None  # one seed never reached it
    assert summary["final_return_mean"] == pytest.approx(((100 + 500 + 820) / 3 + (200 + 810) / 2
                                                          + (300 + 700 + 790) / 3) / 3)
    assert [s["actor_steps_to_target"] for s in summary["per_seed"]] == [30_000, 20_000, None]
    both = seeds.summarise(records[:2], 800.0, 200_000)
    assert both["worst_steps_to_target"] == 30_000 and both["median_steps_to_target"] == 25_000
    assert "2/2 seeds reached 800; median 25,000 env steps" in seeds.summary_line("x", both)


def test_run_seeds_reuses_records_with_the_same_settings_only(tmp_path):
    calls = []

    def run_one(seed):
        calls.append(seed)
        return _record(seed, [float(seed)])

    out = str(tmp_path)
    first = seeds.run_seeds(out, "b", "v", [0, 1], {"k": 1}, run_one)
    assert calls == [0, 1] and [r["seed"] for r in first] == [0, 1]
    seeds.run_seeds(out, "b", "v", [0, 1, 2], {"k": 1}, run_one)
    assert calls == [0, 1, 2]  # 0 and 1 came from their files
    seeds.run_seeds(out, "b", "v", [0], {"k": 2}, run_one)
    assert calls == [0, 1, 2, 0]  # other settings: run again
    with open(seeds.run_path(out, "b", "v", 0)) as f:
        saved = json.load(f)
    assert saved["settings"] == {"k": 2} and saved["machine"]["cpus"] == os.cpu_count()


def test_run_seeds_does_not_reuse_a_record_made_under_another_whole_config(tmp_path):
    # A default that changed (lr 1e-4 -> 3e-4) leaves the settings, which hold only the overrides, equal.
    calls = []

    def run_one(seed, lr):
        calls.append((seed, lr))
        return dict(_record(seed, [float(seed)]), config={"lr": lr, "sizes": (256, 256)})

    out = str(tmp_path)
    seeds.run_seeds(out, "b", "v", [0], {"k": 1}, lambda s: run_one(s, 1e-4), config={"lr": 1e-4, "sizes": (256, 256)})
    seeds.run_seeds(out, "b", "v", [0], {"k": 1}, lambda s: run_one(s, 1e-4), config={"lr": 1e-4, "sizes": (256, 256)})
    assert calls == [(0, 1e-4)]  # the same whole config (tuples as JSON lists): reused
    seeds.run_seeds(out, "b", "v", [0], {"k": 1}, lambda s: run_one(s, 3e-4), config={"lr": 3e-4, "sizes": (256, 256)})
    assert calls == [(0, 1e-4), (0, 3e-4)]  # today's config differs: run again
    with open(seeds.run_path(out, "b", "v", 0)) as f:
        assert json.load(f)["config"]["lr"] == 3e-4
    stem = seeds.run_path(out, "b", "v", 0)[:-len(".json")]
    with open(f"{stem}.superseded1.json") as f:
        assert json.load(f)["config"]["lr"] == 1e-4  # the earlier run is kept aside, not lost


def test_table_rows_come_from_the_bench_json(tmp_path):
    records = [dict(_record(s, [100, 850]), seed=s) for s in (0, 1)]
    summary = seeds.summarise(records, 800.0, 200_000)
    report = {"variants": {"default": {"settings": {"env": "cartpole:swingup", "target": 800.0,
                                                    "overrides": {"sigma": 0.2, "policy_layer_sizes": [64, 64]}},
                                       "summary": summary, "machines": ["CPU X"], "seeds": records}},
              "machine": {"cpus": 2}}
    path = tmp_path / "d4pg_learning.json"
    path.write_text(json.dumps(report))
    (row,) = learning_table.rows_from(str(path))
    assert row["agent"] == "D4PG" and row["task"] == "cartpole:swingup" and row["seeds"] == 2
    assert row["to_target"] == "2/2 reached 800; median 20k, worst 20k"
    assert row["final"] == "475 ± 0" and row["env_steps"] == "20k"
    assert row["published"].startswith("862")
    text = learning_table.render([row])
    assert "| D4PG | cartpole:swingup | default | policy_layer_sizes=64,64, sigma=0.2 | 2 |" in text


def test_overrides_are_typed_like_the_config_and_validated():
    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat_agents.impala.config import IMPALAConfig

    got = seeds.parse_overrides(D4PGConfig, ["sigma=0.2", "n_step=3", "clipping=false",
                                             "policy_layer_sizes=64,64", "torso_init=fan_in"])
    assert got == {"sigma": 0.2, "n_step": 3, "clipping": False, "policy_layer_sizes": (64, 64),
                   "torso_init": "fan_in"}
    assert seeds.parse_overrides(IMPALAConfig, ["max_policy_lag=none", "unroll_length=100"]) == {
        "max_policy_lag": None, "unroll_length": 100}
    assert seeds.parse_overrides(IMPALAConfig, ["max_policy_lag=4"]) == {"max_policy_lag": 4}
    for bad in (["nofield=1"], ["sigma"], ["_INT_FIELDS=1"], ["sigma=-1"]):
        with pytest.raises(SystemExit):
            seeds.parse_overrides(D4PGConfig, bad)
