"""`rlplat sweep`: a grid of config values as concurrent Ray Tune trials, each an ordinary run.

One real sweep through the CLI (a local Ray instance, Tune, two tiny D4PG
runs on cartpole:swingup with their own learners, replay and actors), then
its directory is checked: one run directory per trial with the trial's
config, the trials ran at the same time and shared no process, and the
summary table and the curves cover every trial.
"""

import csv
import datetime
import json
import os

import pytest

from cli_testlib import run_rlplat_as_user
from rlplat.utils import loggers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

STEPS = 1500
SWEEP = ["sweep", "d4pg", "--env", "cartpole:swingup", "--num-actors", "1",
         "--max-actor-steps", str(STEPS), "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32",
         "--global-batch-size", "32", "--min-replay-size", "200", "--samples-per-insert", "4",
         "--eval-every-steps", "500", "--eval-episodes", "1", "--actor-cpus", "0.25", "--learner-cpus", "0.5",
         "--seed", "7", "--grid", "sigma=0.2,0.4"]
TRIALS = {"sigma=0.2,seed7": 0.2, "sigma=0.4,seed7": 0.4}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    base = tmp_path_factory.mktemp("sweep")
    result, seconds = run_rlplat_as_user(*SWEEP, "--logdir", str(base / "s"), cwd=str(base), timeout=600)
    print(f"sweep took {seconds:.0f}s\n{result.stdout[-2000:]}")
    assert result.returncode == 0, result.stderr[-3000:]
    return str(base / "s"), result


def _span(logdir):
    """A trial's life: from its driver's start (run_info.json) to its last record.

    Its first record comes only after start-up, and a fast 1500-step trial can
    log for one second, so records alone need not overlap although both trials
    ran at once (CI saw 1.0 s and 0.7 s of records, 0.2 s apart).
    """
    with open(os.path.join(logdir, "run_info.json"), encoding="utf-8") as f:
        started = datetime.datetime.fromisoformat(json.load(f)["started"]).timestamp()
    times = [r["wall_time"] for r in loggers.read_jsonl(os.path.join(logdir, loggers.JSONL_NAME))]
    return started, max(times)


def test_each_trial_is_an_ordinary_run_with_its_grid_value(sweep):
    sweep_dir, _ = sweep
    assert set(TRIALS) <= set(os.listdir(sweep_dir))
    for name, sigma in TRIALS.items():
        with open(os.path.join(sweep_dir, name, "config.json")) as f:
            config = json.load(f)
        assert config["agent"]["sigma"] == sigma and config["seed"] == 7
        evals = [r for r in loggers.read_jsonl(os.path.join(sweep_dir, name, loggers.JSONL_NAME), "evaluator")
                 if "eval_return" in r]
        assert evals and evals[-1]["step"] >= STEPS
        assert any(n.startswith("ckpt-") for n in os.listdir(os.path.join(sweep_dir, name, "checkpoints")))
        # On the sweep's own local instance, replay sits inside the trial's learner as in a local run;
        # a replay server of its own would be one more process importing TensorFlow per trial.
        with open(os.path.join(sweep_dir, name, "run_info.json")) as f:
            info = json.load(f)
        placed = info["node_placement"]
        assert info["colocate_replay"] is True and placed["replay"].get("colocated"), placed
        assert placed["replay"]["pid"] == placed["learner"]["pid"], placed


def test_trials_ran_at_once_and_shared_no_process(sweep):
    sweep_dir, result = sweep
    assert "2 at once" in result.stdout
    (a0, a1), (b0, b1) = (_span(os.path.join(sweep_dir, n)) for n in TRIALS)
    assert a0 < b1 and b0 < a1, "the two trials did not overlap in time"
    pids = []
    for name in TRIALS:
        with open(os.path.join(sweep_dir, name, "run_info.json")) as f:
            placement = json.load(f)["node_placement"]
        pids.append({p["pid"] for p in placement.values()})
    assert not pids[0] & pids[1], pids


def test_summary_and_curves_cover_every_trial(sweep):
    sweep_dir, result = sweep
    with open(os.path.join(sweep_dir, "summary.csv")) as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["trial"] for r in rows) == sorted(TRIALS)
    for row in rows:
        assert float(row["sigma"]) == TRIALS[row["trial"]] and row["error"] == ""
        assert int(row["env_steps"]) >= STEPS and row["final_return"] not in ("", None)
    with open(os.path.join(sweep_dir, "curves.csv")) as f:
        assert {r["group"] for r in csv.DictReader(f)} == {"sigma=0.2", "sigma=0.4"}
    assert os.path.getsize(os.path.join(sweep_dir, "curves.png")) > 10_000
    assert "summary:" in result.stdout
