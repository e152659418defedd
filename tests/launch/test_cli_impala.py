"""`rlplat train impala`: help, one-line usage errors, a short real run with 2 replicas + resume."""

import json
import os

import pytest

from cli_testlib import assert_usage_error, run_rlplat


def _rlplat(*args, timeout=240):
    return run_rlplat(*args, timeout=timeout)


def test_help_lists_the_shared_and_agent_flags():
    result = _rlplat("train", "impala", "--help", timeout=60)
    assert result.returncode == 0, result.stderr
    for flag in ("--num-actors", "--num-learner-replicas", "--address", "--logdir", "--resume",
                 "--max-policy-lag", "--core", "--unroll-length", "gym:CartPole-v1"):
        assert flag in result.stdout


@pytest.mark.parametrize("args, fragments", [
    (["--core", "gru"], ["--core mlp or --core lstm"]),
    (["--max-policy-lag", "-1"], ["--max-policy-lag"]),
    (["--env", "gym:CartPol-v1"], ["did you mean: gym:CartPole-v1"]),
    (["--num-learner-replicas", "3"], ["--global-batch-size", "multiple of", "3"]),
    (["--queue-size", "4"], ["--queue-size"]),
    (["--num-actors", "0"], ["--num-actors must be >= 1"]),
    (["--address", "nowhere"], ["--address must be"]),
    (["--resume"], ["--resume needs --logdir"]),
    (["--layer-sizes", "8,x"], ["--layer-sizes"]),
])
def test_bad_flags_exit_2_with_one_line(args, fragments):
    assert_usage_error(_rlplat("train", "impala", *args, timeout=60), *fragments)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_short_run_on_two_learner_replicas_writes_everything_and_resumes(tmp_path):
    logdir = str(tmp_path / "run")
    common = ["train", "impala", "--logdir", logdir, "--num-learner-replicas", "2",
              "--max-policy-lag", "50"]
    result = _rlplat(*common, "--max-actor-steps", "4000")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done: " in result.stdout and "learner up: 2 replica(s)" in result.stdout
    # Where the results are and how to see them; a gym task is not rendered.
    assert f"rlplat plot {logdir}" in result.stdout and f"rlplat status --logdir {logdir}" in result.stdout
    assert f"rlplat eval --logdir {logdir} --episodes 3\n" in result.stdout
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    learner = [r for r in records if r["role"] == "learner" and "policy_lag_mean" in r]
    assert learner and "dropped_unrolls_total" in learner[-1]
    assert any(r["role"] == "evaluator" for r in records)
    with open(os.path.join(logdir, "run_info.json")) as f:
        info = json.load(f)
    assert info["config"]["agent"]["max_policy_lag"] == 50
    # The driver imports no TensorFlow: its TensorBoard writer is TF-free and the
    # learner reads the replay counts for it (they still reach the logs).
    assert info["driver_tensorflow"] is False
    assert any(r["role"] == "learner" and r.get("replay_inserts", 0) > 0 for r in records)
    checkpoints = os.listdir(os.path.join(logdir, "checkpoints"))
    assert any(name.endswith(".index") for name in checkpoints)

    # Refused before TF or Ray start: one line, nothing before it.
    assert_usage_error(_rlplat(*common, "--max-actor-steps", "8000"), "--resume")
    result = _rlplat(*common, "--max-actor-steps", "8000", "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming in" in result.stdout and "done: " in result.stdout
