"""run_local: short real runs (Reverb, MuJoCo, learner) under the shared controller."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MUJOCO_GL", "osmesa")

import json

import numpy as np
import pytest

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat.runners import EnvironmentFactory, Experiment, LocalLayout, RunResult, run_local

CONFIG = D4PGConfig(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), num_atoms=11,
                    global_batch_size=32, min_replay_size=200, samples_per_insert=4.0)
BUILDER = D4PGBuilder(CONFIG, steps_per_call=4)
SHORT_EPISODES = EnvironmentFactory("cartpole:swingup", {"time_limit": 250})


@pytest.mark.timeout(180)
def test_run_local_inserts_and_learns_at_the_configured_ratio():
    # The builder's SampleToInsertRatio limiter (error buffer 2 * 32 samples =
    # 16 inserts) would block this single thread after a few inserts; run_local
    # must swap it for MinSize and hold the ratio itself.
    progress = []
    experiment = Experiment(BUILDER, SHORT_EPISODES, num_actors=1, max_actor_steps=1200,
                            eval_every_actor_steps=0, eval_episodes=1)
    out = run_local(experiment, LocalLayout(actor_chunk_steps=100, on_progress=progress.append))
    assert isinstance(out, RunResult) and out.stop_reason == "max_actor_steps"
    assert out.actor_steps == 1200 and out.episodes == 4 and len(progress) == 12
    # (1200 - 200) inserts * 4 / 32 = 125 steps; prefetching and whole calls overshoot a little.
    assert 100 <= out.learner_steps <= 160
    assert out.samples_per_insert == pytest.approx(4.0, rel=0.25)
    # One evaluation, the final one, at the last step.
    assert len(out["eval_returns"]) == 1 and np.isfinite(out["eval_returns"][0])
    assert [step for step, _ in out.evaluations] == [1200]
    assert progress[0]["learner_steps"] == 0 and progress[-1]["learner_steps"] == out.learner_steps


@pytest.mark.timeout(180)
def test_the_runs_seed_fixes_the_initial_weights():
    # Fewer steps than min_replay_size: no learner step, so the final greedy
    # evaluation (same seed: same environment) acts with the initial policy.
    def initial_policy_returns(seed):
        out = run_local(Experiment(BUILDER, SHORT_EPISODES, num_actors=1, max_actor_steps=100, seed=seed,
                                   eval_every_actor_steps=0, eval_episodes=1))
        assert out.learner_steps == 0
        return out["eval_returns"]

    assert initial_policy_returns(3) == initial_policy_returns(3)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_local_evaluates_on_the_step_grid_checkpoints_and_resumes(tmp_path):
    logdir = str(tmp_path / "run")
    experiment = Experiment(BUILDER, SHORT_EPISODES, num_actors=2, max_actor_steps=1000,
                            eval_every_actor_steps=400, eval_episodes=1, logdir=logdir)
    first = run_local(experiment, LocalLayout(actor_chunk_steps=100))
    # Two actors take turns; the controller cuts turns at the 400-step grid.
    assert [step for step, _ in first.evaluations] == [400, 800, 1000]
    assert first.checkpoint and first.checkpoint.endswith(f"ckpt-{first.learner_steps}")
    records = [json.loads(line) for line in open(os.path.join(logdir, "metrics.jsonl"))]
    assert [r["step"] for r in records if r["role"] == "evaluator"] == [400, 800, 1000]

    # A new run in the same directory is refused; --resume continues counts and learner.
    with pytest.raises(ValueError, match="already holds a run with checkpoints; resume it"):
        run_local(experiment)
    resumed = run_local(Experiment(BUILDER, SHORT_EPISODES, num_actors=2, max_actor_steps=1400,
                                   eval_every_actor_steps=400, eval_episodes=1, logdir=logdir, resume=True),
                        LocalLayout(actor_chunk_steps=100))
    assert resumed.actor_steps == 1400
    assert [step for step, _ in resumed.evaluations] == [1200, 1400]
    # Replay starts empty again: 200 warm-up inserts, then 200 at 4 samples / 32 per step.
    assert first.learner_steps < resumed.learner_steps <= first.learner_steps + 40


def test_experiment_refuses_bad_values_with_one_line():
    # In its own field names: the command line maps them to flags (rlplat.launch.common.as_flags).
    for kwargs, fragment in [({"num_actors": 0}, "num_actors must be >= 1"),
                             ({"max_actor_steps": 0}, "max_actor_steps must be >= 1"),
                             ({"max_actor_steps": 2**63}, "max_actor_steps must fit in 64 bits"),
                             ({"eval_episodes": 0}, "eval_episodes must be >= 1"),
                             ({"seed": -1}, "seed must be in 0..4294967295"),
                             ({"seed": 2**32}, "seed must be in 0..4294967295"),
                             ({"resume": True}, "resume needs the logdir"),
                             ({"target_eval_return": float("nan")}, "target_eval_return must be a finite number"),
                             ({"checkpoint_every_s": 0}, "checkpoint_every_s must be a number of seconds > 0")]:
        with pytest.raises(ValueError, match=fragment) as info:
            Experiment(BUILDER, "cartpole:swingup", **kwargs)
        assert "\n" not in str(info.value) and "--" not in str(info.value)
    with pytest.raises(ValueError, match="gym: tasks cannot be recorded"):
        Experiment(BUILDER, "gym:Pendulum-v1", video_every_evals=1)
    with pytest.raises(TypeError, match="run_local takes an Experiment"):
        run_local(BUILDER)


def test_run_local_refuses_ray_settings_instead_of_ignoring_them():
    from rlplat.runners import RayLayoutConfig  # pylint: disable=g-import-not-at-top

    experiment = Experiment(D4PGBuilder(D4PGConfig()), EnvironmentFactory("cartpole:swingup"), seed=0,
                            max_actor_steps=100)
    with pytest.raises(TypeError, match="run_local takes a LocalLayout .*envs_per_actor") as raised:
        run_local(experiment, RayLayoutConfig(envs_per_actor=4))
    assert "\n" not in str(raised.value)


@pytest.mark.timeout(180)
def test_run_local_records_and_prints_the_learners_precision(tmp_path, capsys):
    from rlplat import precision  # pylint: disable=g-import-not-at-top

    logdir = str(tmp_path / "run")
    builder = D4PGBuilder(CONFIG.replace(precision="auto", min_replay_size=100), steps_per_call=4)
    run_local(Experiment(builder, SHORT_EPISODES, num_actors=1, max_actor_steps=200, eval_every_actor_steps=0,
                         eval_episodes=1, logdir=logdir), LocalLayout(actor_chunk_steps=100))
    want = precision.resolve("auto", bf16_parity=True)  # this machine's CPU flags decide
    with open(os.path.join(logdir, "run_info.json")) as f:
        assert json.load(f)["precision"] == {"requested": "auto", "precision": want.precision,
                                             "reason": want.reason}
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("precision:")]
    assert lines == [f"precision: D4PG learner in {want.precision} (auto: {want.reason})"]


def test_one_learner_call_per_chunk_pays_each_call_with_its_inserts():
    # 4 steps of 32 samples at 4 samples per insert: 32 inserts per call.
    assert LocalLayout.one_learner_call_per_chunk(BUILDER).actor_chunk_steps == 32
    # The defaults: 8 steps of 256 at 32 per insert, 64 inserts; kwargs pass through.
    layout = LocalLayout.one_learner_call_per_chunk(D4PGBuilder(D4PGConfig()), report_every_s=None)
    assert (layout.actor_chunk_steps, layout.report_every_s) == (64, None)
    # A ratio above a call's samples still takes one step per turn, never a zero chunk.
    tiny = D4PGBuilder(D4PGConfig(global_batch_size=32, samples_per_insert=1000.0), steps_per_call=1)
    assert LocalLayout.one_learner_call_per_chunk(tiny).actor_chunk_steps == 1
