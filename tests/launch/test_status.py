"""``rlplat status``: a run's health read from its files, checked against the records written.

The live-run case (a real `rlplat train`, live then ended) is in
``tests/distributed/test_distributed_signals.py``, which has such a run.
"""

import json
import os
import time

import pytest

from cli_testlib import assert_usage_error, run_rlplat
from rlplat import run_dir
from rlplat.utils import loggers
from rlplat.utils import run_info
from rlplat.utils import run_status


def _make_run(logdir, pid=None):
    config = {"env": "cartpole:swingup", "seed": 3, "num_actors": 2, "max_actor_steps": 10_000,
              "agent": {"samples_per_insert": 32.0}, "layout": {"target_eval_return": 800.0}}
    run_info.write_run_info(logdir, config, extra={
        "builder": "D4PGBuilder",
        "node_placement": {"learner": {"node_ip": "127.0.0.1", "node_id": "abcdef0123", "pid": 11}}})
    if pid is not None:  # another driver's PID (a run that ended)
        path = os.path.join(logdir, "run_info.json")
        with open(path) as f:
            info = json.load(f)
        info["pid"] = pid
        with open(path, "w") as f:
            json.dump(info, f)
    learner = loggers.MetricsLogger(logdir, "learner", tensorboard=False)
    for i, rate in enumerate((100.0, 200.0, 300.0)):
        learner.write(100 * (i + 1), {"actor_steps": 1000 * (i + 1), "env_steps_per_second": rate,
                                      "learner_steps_per_second": rate / 8, "replay_size": 1000 * (i + 1),
                                      "samples_per_insert": 31.5, "policy_lag": 7.0, "actor_restarts": 1})
    learner.close()
    evaluator = loggers.MetricsLogger(logdir, "evaluator", tensorboard=False)
    evaluator.write(1000, {"eval_return": 500.0, "learner_steps": 90})
    evaluator.write(2000, {"eval_return": 420.0, "learner_steps": 190})
    evaluator.close()
    driver = loggers.MetricsLogger(logdir, "driver", tensorboard=False)
    driver.write(150, {"event": "actor_failed", "actor_index": 1})
    driver.close()
    os.makedirs(os.path.join(logdir, "checkpoints"))
    for step in (100, 250):
        open(os.path.join(logdir, "checkpoints", f"ckpt-{step}.index"), "w").close()
    run_dir.write_state(os.path.join(logdir, "checkpoints"), ["ckpt-100", "ckpt-250"])
    with open(os.path.join(logdir, "checkpoints", "counters.json"), "w") as f:
        json.dump({"250": {"actor_steps": 2500}}, f)


def test_status_reads_the_records_of_a_live_run(tmp_path):
    logdir = str(tmp_path / "run")
    _make_run(logdir)  # this process wrote run_info: its PID is alive
    status = run_status.read_status(logdir)
    assert status["run"]["state"] == "live" and status["run"]["pid"] == os.getpid()
    assert (status["agent"], status["env"], status["seed"]) == ("D4PGBuilder", "cartpole:swingup", 3)
    assert (status["actor_steps"], status["learner_steps"], status["replay_size"]) == (3000, 300, 3000)
    assert status["env_steps_per_s"] == pytest.approx(200.0)  # mean of the three (all within 60 s)
    assert status["learner_steps_per_s"] == pytest.approx(25.0)
    assert (status["samples_per_insert"], status["samples_per_insert_target"]) == (31.5, 32.0)
    assert status["policy_lag"] == 7.0 and status["actor_restarts"] == 1
    assert status["last_eval"]["return"] == 420.0 and status["last_eval"]["actor_steps"] == 2000
    assert status["best_eval"] == 500.0
    assert status["checkpoint"]["learner_step"] == 250 and status["checkpoint"]["actor_steps"] == 2500
    assert status["eta_s"] == pytest.approx((10_000 - 3000) / 200.0)
    assert status["roles"] == {"learner": {"node_ip": "127.0.0.1", "node_id": "abcdef01", "pid": 11}}
    assert [e["event"] for e in status["events"]] == ["actor_failed"]
    text = "\n".join(run_status.format_status(status))
    for fragment in ("state    live", "3,000 / 10,000 env steps", "200.0 env steps/s",
                     "samples per insert 31.5 (target 32)", "last 420.0 at 2,000 env steps",
                     "best 500.0, target 800", "ckpt-250 (learner step 250", "eta      35s"):
        assert fragment in text, (fragment, text)


def test_a_sharded_run_shows_each_shards_size_and_ratio(tmp_path):
    logdir = str(tmp_path / "run")
    _make_run(logdir)
    assert run_status.read_status(logdir)["replay_shards"] == []  # one server: no shard line
    learner = loggers.MetricsLogger(logdir, "learner", tensorboard=False)
    learner.write(400, {"actor_steps": 4000, "replay_size": 4000, "samples_per_insert": 31.0,
                        "replay_shard0_size": 2100, "replay_shard0_inserts": 2100, "replay_shard0_samples": 65100,
                        "replay_shard0_samples_per_insert": 31.0, "replay_shard1_size": 1900,
                        "replay_shard1_inserts": 1900, "replay_shard1_samples": 59280,
                        "replay_shard1_samples_per_insert": 31.2})
    learner.close()
    status = run_status.read_status(logdir)
    assert [s["size"] for s in status["replay_shards"]] == [2100, 1900]
    text = "\n".join(run_status.format_status(status))
    assert ("shards   0: 2,100 items, samples per insert 31.0; 1: 1,900 items, samples per insert 31.2"
            in text), text


def test_actor_steps_are_the_newest_count_of_actor_and_learner_records(tmp_path):
    """A chunk's actor record can be newer than the periodic learner record (the CI race of the
    signal test: status said 0 env steps while an actor record said 1000)."""
    logdir = str(tmp_path / "run")
    _make_run(logdir)
    actor = loggers.MetricsLogger(logdir, "actor", tensorboard=False)
    actor.write(4000, {"actor_index": 0, "episode_return": 1.0})
    actor.close()
    assert run_status.read_status(logdir)["actor_steps"] == 4000
    learner = loggers.MetricsLogger(logdir, "learner", tensorboard=False)
    learner.write(400, {"actor_steps": 5000})
    learner.close()
    assert run_status.read_status(logdir)["actor_steps"] == 5000


def test_an_ended_run_has_no_eta(tmp_path):
    logdir = str(tmp_path / "run")
    _make_run(logdir, pid=2 ** 22 + 1)  # above any PID Linux hands out: not running
    status = run_status.read_status(logdir, now=time.time() + 600)
    assert status["run"]["state"] == "ended" and status["eta_s"] is None
    assert status["run"]["last_record_age_s"] >= 600


def test_status_command_prints_lines_and_json(tmp_path):
    logdir = str(tmp_path / "run")
    _make_run(logdir, pid=2 ** 22 + 1)
    result = run_rlplat("status", "--logdir", logdir, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "state    ended" in result.stdout and "progress 3,000 / 10,000 env steps" in result.stdout
    result = run_rlplat("status", "--logdir", logdir, "--json", timeout=60)
    assert json.loads(result.stdout)["checkpoint"]["learner_step"] == 250


@pytest.mark.parametrize("args, fragment", [
    (["--logdir", "{tmp}/missing"], "is not a directory"),
    (["--logdir", "{tmp}"], "has neither metrics.jsonl nor run_info.json"),
    (["--logdir", "{tmp}", "--watch", "0"], "--watch must be > 0"),
    ([], "--logdir"),
])
def test_status_bad_input_is_one_line_exit_2(tmp_path, args, fragment):
    assert_usage_error(run_rlplat("status", *[a.format(tmp=tmp_path) for a in args], timeout=60),
                       fragment)
