"""``replay_checkpoint`` end to end: replay saved with the final checkpoint comes back on resume.

Real Ray, Reverb and MuJoCo (D4PG on cartpole:swingup, small networks, one
actor). The warm-up (``min_replay_size``) is large next to what the resumed
run inserts before its first step, so a learner that had to refill replay
shows up in the run's own ``learner_first_step`` record.
"""

import json
import os
import time

import pytest
from resume_ratio import check_no_catch_up_burst

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat import replay_rules
from rlplat.distributed import cluster
from rlplat.distributed import counters
from rlplat.distributed import layout
from rlplat.replay import checkpoints
from rlplat.utils import loggers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

ENV = "cartpole:swingup"
CONFIG = D4PGConfig(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), num_atoms=11,
                    global_batch_size=32, min_replay_size=1000, samples_per_insert=8.0,
                    max_replay_size=100_000, variable_update_period=100)
BUILDER = D4PGBuilder(config=CONFIG, steps_per_call=4)
LAYOUT = layout.RayLayoutConfig(actor_chunk_steps=500, learner_chunk_steps=16, console_every_s=1.0,
                                eval_every_actor_steps=0, eval_episodes=1, stop_timeout_s=60,
                                replay_checkpoint=True)


@pytest.fixture(scope="module")
def ray_session():
    connection = cluster.connect(num_cpus=2)
    yield connection
    cluster.disconnect(connection)


def _run(logdir, max_actor_steps, resume):
    return layout.run_on_ray(BUILDER, ENV, num_actors=1, max_actor_steps=max_actor_steps, logdir=logdir,
                             seed=5, resume=resume, console=False, layout=LAYOUT)


def test_replay_saved_with_the_final_checkpoint_is_restored_and_learning_resumes_without_refilling(
        ray_session, tmp_path):
    del ray_session
    logdir = str(tmp_path / "run")
    first = _run(logdir, 2500, resume=False)
    step = first["learner_steps"]
    with open(os.path.join(logdir, "config.json")) as f:
        assert json.load(f)["layout"]["replay_checkpoint"] is True  # so a resume keeps it
    saved = checkpoints.find(logdir, step)
    assert saved == os.path.join(logdir, "replay_checkpoints", f"ckpt-{step}")
    items = checkpoints.saved_items(saved)
    assert items == counters.load_counters(logdir, step)["replay_items"] > CONFIG.min_replay_size

    resumed_at = time.time()
    second = _run(logdir, first["actor_steps"] + 1000, resume=True)
    jsonl = os.path.join(logdir, loggers.JSONL_NAME)
    events = [r for r in loggers.read_jsonl(jsonl, "driver") if r["wall_time"] > resumed_at]
    restore = [r for r in events if r["event"] == "replay_restore"]
    assert len(restore) == 1 and restore[0]["replay_restored_from"] == saved, events
    # The restored server held exactly what was saved, before any actor inserted.
    assert restore[0]["replay_restored_items"] == items == second["replay_restored_items"]
    with open(os.path.join(logdir, "run_info.json")) as f:
        assert json.load(f)["replay_restored_items"] == items
    # The first step came without a new warm-up (an empty replay needs min_replay_size inserts).
    first_step = [r for r in events if r["event"] == "learner_first_step"]
    assert len(first_step) == 1, events
    assert first_step[0]["replay_inserts_before_first_step"] < CONFIG.min_replay_size // 4, first_step
    # ...nor a burst or a stall: the restored rate limiter goes on from its counts.
    learner = [r for r in loggers.read_jsonl(jsonl, "learner") if r["wall_time"] > resumed_at]
    buffer = replay_rules.default_error_buffer(CONFIG.samples_per_insert, CONFIG.min_replay_size,
                                               CONFIG.global_batch_size, 1)
    check_no_catch_up_burst(learner, restored_step=step, spi=CONFIG.samples_per_insert,
                            min_size=CONFIG.min_replay_size, buffer=buffer,
                            batch=CONFIG.global_batch_size,
                            inserts0=restore[0]["replay_restored_inserts"],
                            samples0=restore[0]["replay_restored_samples"])
    assert second["learner_steps"] > step
