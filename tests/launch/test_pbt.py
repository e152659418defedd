"""`rlplat sweep --scheduler pbt`: a real population on Ray Tune, whose exploits copy whole runs.

Two D4PG trials on cartpole:balance, 3,000 env steps in segments of 1,000:
two PBT decisions, each copying one trial's run (weights, optimizer state,
replay, history) into the other trial and perturbing its config.
"""

import json
import os

import pytest

from cli_testlib import run_rlplat
from rlplat.utils import loggers

# The fixture trains 6 segments of 2 concurrent runs: minutes, more on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.timeout(1800)]

MIN_REPLAY = 100


@pytest.fixture(scope="module")
def population(tmp_path_factory):
    sweep_dir = str(tmp_path_factory.mktemp("pbt") / "sweep")
    result = run_rlplat(
        "sweep", "d4pg", "--env", "cartpole:balance", "--scheduler", "pbt", "--seeds", "2",
        "--mutate", "sigma=0.1:0.5", "--mutate", "critic-learning-rate=1e-5:1e-3",
        "--perturbation-interval", "1000", "--max-actor-steps", "3000", "--eval-every-steps", "1000",
        "--eval-episodes", "1", "--num-actors", "1", "--learner-cpus", "0.25", "--actor-cpus", "0.2",
        "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32", "--global-batch-size", "32",
        "--min-replay-size", str(MIN_REPLAY), "--logdir", sweep_dir, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(os.path.join(sweep_dir, "lineage.jsonl")) as f:
        events = [json.loads(line) for line in f]
    return sweep_dir, events


def _evals(logdir):
    return [[r["step"], r["eval_return"]] for r in loggers.read_jsonl(os.path.join(logdir, "metrics.jsonl"),
                                                                        "evaluator") if "eval_return" in r]


def test_two_decisions_each_copy_one_trial(population):
    _, events = population
    assert [e["at_env_steps"] // 1000 for e in events] == [1, 2], events
    for e in events:
        assert e["trial"] != e["copied"]
        assert e["changed"], "an exploit perturbs at least one mutated field"
        for field, (old, new) in e["changed"].items():
            assert e["donor_config"][field] == old and e["config"][field] == new


def test_an_exploit_resumes_the_donors_weights_optimizer_and_replay(population):
    _, events = population
    for e in events:
        # The learner restored the donor's newest checkpoint (networks, both Adam
        # optimizers with their slots and iterations, the step counter: the
        # restore asserts every object matched) ...
        assert e["donor_checkpoint_step"] and e["resumed_from_learner_step"] == e["donor_checkpoint_step"]
        # ... and replay came back from the donor's replay checkpoint, not empty.
        assert e["replay_restored_items"] >= MIN_REPLAY


def test_the_copy_carries_the_donors_history_and_the_new_config(population):
    sweep_dir, events = population
    last_event = {}
    for e in events:
        last_event[e["trial"]] = e
    for trial, e in last_event.items():
        logdir = os.path.join(sweep_dir, trial)
        evals = _evals(logdir)
        copied = [ev for ev in evals if ev[0] <= e["at_env_steps"]]
        assert copied == e["donor_evals"], "the trial's curve up to the exploit is the donor's"
        assert max(ev[0] for ev in evals) >= 3000
        with open(os.path.join(logdir, "config.json")) as f:
            agent = json.load(f)["agent"]
        for field, value in e["config"].items():
            assert agent[field] == pytest.approx(value), f"{trial} trained on with its perturbed {field}"


def test_summary_names_the_lineage_and_final_configs(population):
    sweep_dir, events = population
    with open(os.path.join(sweep_dir, "summary.md")) as f:
        summary = f.read()
    assert "**Lineage**" in summary and "final sigma" in summary
    for e in events:
        assert f"| {e['trial']} | {e['copied']} | {e['at_env_steps']:,} |" in summary
