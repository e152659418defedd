"""The `rlplat` command line: usage errors, a short real run, resume, `envs`."""

import json
import os
import sys
import types

import pytest

from cli_testlib import assert_usage_error, run_rlplat
from rlplat.launch import cli

@pytest.mark.parametrize("args, fragments", [
    (["--num-replicas", "0"], ["--num-replicas must be >= 1"]),
    (["--resume"], ["--resume needs --logdir"]),
    (["--global-batch-size", "0"], ["--global-batch-size"]),
    (["--num-replicas", "3"], ["--global-batch-size", "multiple of 3"]),
    (["--num-steps", "ten"], ["--num-steps"]),
    (["--hidden-sizes", "64,x"], ["--hidden-sizes"]),
    (["--no-such-flag"], ["--no-such-flag"]),
])
def test_bad_flags_exit_2_with_one_line(args, fragments):
    assert_usage_error(run_rlplat("train", "supervised", *args, timeout=60), *fragments)


def test_missing_command_is_a_usage_error():
    assert_usage_error(run_rlplat("train", timeout=60), "AGENT")


@pytest.mark.multiprocess  # trains in `rlplat` processes
def test_short_run_writes_everything_and_resumes(tmp_path):
    logdir = str(tmp_path / "run")
    result = run_rlplat("train", "supervised", "--num-replicas", "2", "--num-steps", "50",
                     "--logdir", logdir, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "held-out accuracy" in result.stdout
    for role in ("learner", "evaluator"):
        assert any(f.startswith("events.out.tfevents") for f in os.listdir(os.path.join(logdir, "tb", role)))
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f]
    assert steps == [50, 50]  # learner and evaluator at the end
    assert os.path.exists(os.path.join(logdir, "checkpoints", "ckpt-50.index"))
    with open(os.path.join(logdir, "run_info.json")) as f:
        info = json.load(f)
    assert info["config"]["num_steps"] == 50 and info["num_replicas"] == 2 and "tensorflow" in info["versions"]

    # Starting over on top of it is refused; resuming (under 1 replica) continues.
    assert_usage_error(run_rlplat("train", "supervised", "--logdir", logdir), "--resume")
    result = run_rlplat("train", "supervised", "--num-steps", "60", "--logdir", logdir, "--resume")
    assert result.returncode == 0, result.stderr
    assert "done: step 60" in result.stdout
    assert os.path.exists(os.path.join(logdir, "checkpoints", "ckpt-60.index"))


def test_envs_prints_every_task(monkeypatch, capsys):
    fake = types.ModuleType("rlplat_envs")
    fake.list_tasks = lambda: ["cartpole:swingup", ("walker", "walk")]
    monkeypatch.setitem(sys.modules, "rlplat_envs", fake)
    assert cli.main(["envs"]) == 0
    assert capsys.readouterr().out.splitlines() == ["cartpole:swingup", "walker:walk"]


def test_ctrl_c_exits_130(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    fake = types.ModuleType("rlplat_envs")
    fake.list_tasks = interrupted
    monkeypatch.setitem(sys.modules, "rlplat_envs", fake)
    assert cli.main(["envs"]) == 130
    assert capsys.readouterr().err.strip() == "rlplat: interrupted"


@pytest.mark.multiprocess  # loads every task in an `rlplat` process
def test_real_envs_command():
    try:
        from rlplat_envs import list_tasks  # noqa: F401
    except ImportError:
        pytest.skip("envs.list_tasks is not there yet")
    result = run_rlplat("envs", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


@pytest.mark.multiprocess  # starts Ray: whether actors fit is a fact of the cluster
def test_placement_that_does_not_fit_the_cluster_names_the_flag(tmp_path):
    # The planner raises in field names (num_actors); the command line speaks flags.
    result = run_rlplat("train", "d4pg", "--num-actors", "64", "--max-actor-steps", "100",
                        "--logdir", str(tmp_path / "run"), timeout=300)
    assert_usage_error(result, "64 actors", "pass --num-actors", "or fewer")
    assert "num_actors" not in result.stderr
