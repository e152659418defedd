"""run_local: a short real run (Reverb, MuJoCo, learner) finishes without deadlock."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MUJOCO_GL", "osmesa")

import time

import numpy as np
import pytest

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat_envs import make_environment
from rlplat.layouts import run_local


@pytest.mark.timeout(120)
def test_run_local_inserts_and_learns_at_the_configured_ratio():
    # The builder's SampleToInsertRatio limiter (error buffer 2 * 32 samples =
    # 16 inserts) would block this single thread after a few inserts; run_local
    # must swap it for MinSize and hold the ratio itself.
    config = D4PGConfig(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), num_atoms=11,
                        global_batch_size=32, min_replay_size=200, samples_per_insert=4.0)
    builder = D4PGBuilder(config, steps_per_call=4)
    progress = []
    start = time.monotonic()
    out = run_local(builder, lambda seed: make_environment("cartpole:swingup", seed=seed,
                                                           time_limit=250),
                    num_steps=1200, actor_chunk_steps=100, eval_episodes=1,
                    on_progress=progress.append)
    assert time.monotonic() - start < 90
    assert out["actor_steps"] == 1200 and out["episodes"] == 4 and len(progress) == 12
    # (1200 - 200) inserts * 4 / 32 = 125 steps; prefetching and whole calls overshoot a little.
    assert 100 <= out["learner_steps"] <= 160
    assert out["samples_per_insert"] == pytest.approx(4.0, rel=0.25)
    assert len(out["eval_returns"]) == 1 and np.isfinite(out["eval_returns"][0])
    assert progress[0]["learner_steps"] == 0 and progress[-1]["learner_steps"] == out["learner_steps"]
