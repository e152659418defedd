"""run_on_ray end to end on a real local Ray instance (shared by this module).

One short D4PG run on cartpole:swingup (small networks, small replay) is made
once and inspected by several tests; a second run resumes it while an actor
process is SIGKILLed, so resume and actor restarts are covered by one more
run instead of two. That run ends on a ``stop_event`` once the restarted actor
has acted, so its length follows the machine's speed instead of racing it.
"""

import dataclasses
import glob
import inspect
import json
import os
import shutil
import signal
import sys
import threading
import time

import numpy as np
import psutil
import pytest
import ray
import tensorflow as tf

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat.distributed import cluster
from rlplat.distributed import counters
from rlplat import runners
from rlplat import run_dir
from rlplat.distributed import errors
from rlplat import seeding
from rlplat.replay.adders import NStepTransitionAdder
from rlplat.utils import loggers

pytestmark = pytest.mark.multiprocess

ENV = "cartpole:swingup"
SEED = 11
FIRST_STEPS = 3000
MAX_PENDING_ITEMS = inspect.signature(NStepTransitionAdder).parameters["max_pending_items"].default
SMALL = D4PGConfig(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), num_atoms=11,
                   global_batch_size=32, min_replay_size=200, samples_per_insert=8.0,
                   max_replay_size=100_000, variable_update_period=100)
BUILDER = D4PGBuilder(config=SMALL, steps_per_call=4)
# No periodic evaluation: the tests check the final one, and on 2 cores a
# greedy episode mid-run only slows every run down.
LAYOUT = runners.RayLayoutConfig(actor_chunk_steps=500, learner_chunk_steps=16, console_every_s=1.0,
                                 stop_timeout_s=60, console=False)
SCHEDULE = dict(eval_every_actor_steps=0, eval_episodes=1)


@pytest.fixture(scope="module")
def ray_session():
    connection = cluster.connect(num_cpus=2)
    yield connection
    cluster.disconnect(connection)


@pytest.fixture(scope="module")
def first_run(ray_session, tmp_path_factory):
    del ray_session
    logdir = str(tmp_path_factory.mktemp("d4pg") / "run")
    summary = runners.run_on_ray(runners.Experiment(
        BUILDER, ENV, num_actors=2, max_actor_steps=FIRST_STEPS, logdir=logdir, seed=SEED,
        video_every_evals=1, **SCHEDULE), LAYOUT)  # the final evaluation also on video
    return logdir, summary


def _wait_for_free_cpus(expected, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) >= expected:
            return True
        time.sleep(0.5)
    return False


def test_short_run_counts_match(first_run):
    _, summary = first_run
    assert summary["actor_steps"] >= FIRST_STEPS
    assert summary["learner_steps"] > 0
    assert summary["episodes"] >= 2  # 1000-step episodes, two actors
    # Every actor acted with learned weights by the end, not the initial ones.
    assert len(summary["actor_policy_versions"]) == 2
    assert all(v > 0 for v in summary["actor_policy_versions"])
    assert summary["eval_policy_version"] == summary["learner_steps"]
    assert summary["actor_restarts"] == 0
    assert 0 < summary["samples_per_insert"] <= SMALL.samples_per_insert * 1.5
    # Every worker was released: the shared instance has all its CPUs back.
    assert _wait_for_free_cpus(2.0)


def test_actors_on_the_learners_host_read_weights_from_shared_memory_and_it_is_removed(first_run):
    logdir, _ = first_run
    records = [json.loads(line) for line in open(os.path.join(logdir, "metrics.jsonl"))]
    last = {}
    for r in records:
        if r.get("role") == "actor" and "shared_weight_reads" in r:
            last[r["actor_index"]] = r
    assert sorted(last) == [0, 1]
    for r in last.values():
        # Every pull after the first was answered from shared memory, and new
        # versions did arrive that way (a Ray pull was the first one only).
        assert r["shared_weight_reads"] > 0 and r["weight_pulls"] > 1, r
    with open(os.path.join(logdir, "run_info.json")) as f:
        learner_pid = json.load(f)["node_placement"]["learner"]["pid"]
    deadline = time.monotonic() + 30
    while glob.glob(f"/dev/shm/rlplat_w_{learner_pid}_*") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not glob.glob(f"/dev/shm/rlplat_w_{learner_pid}_*")  # the learner's block went with it


def test_the_status_lines_policy_lag_is_taken_when_actors_report_not_a_chunk_later(first_run):
    """An actor re-reads the policy every ``variable_update_period`` of its steps, so its lag is at most
    what the learner does meanwhile (both actors' steps / env steps per learner step) plus one learner
    call. The status line (and each learner record) shows that lag; comparing an actor's last reported
    version with the learner's count at a later status line would add the report's age, up to a chunk."""
    logdir, _ = first_run
    records = [json.loads(line) for line in open(os.path.join(logdir, "metrics.jsonl"))]
    lags = [r["policy_lag"] for r in records if r.get("role") == "learner" and r.get("policy_lag") is not None]
    env_steps_per_learner_step = SMALL.global_batch_size / SMALL.samples_per_insert
    between_reads = 2 * SMALL.variable_update_period / env_steps_per_learner_step
    chunk_age = 2 * LAYOUT.actor_chunk_steps / env_steps_per_learner_step
    bound = between_reads + BUILDER.steps_per_call + LAYOUT.learner_chunk_steps
    assert lags and bound < chunk_age / 2
    assert float(np.median(lags)) <= bound, (lags, bound)


def test_the_final_evaluation_is_on_video_in_the_logdir_and_tensorboard(first_run):
    import imageio.v2 as imageio

    logdir, summary = first_run
    videos = sorted(os.listdir(os.path.join(logdir, "videos")))
    assert videos == [f"eval-{summary['actor_steps']}.mp4"]
    frames = np.stack(imageio.mimread(os.path.join(logdir, "videos", videos[0]), memtest=False))
    # One 1000-step episode at 100 control steps/s, kept at <= 30 fps: every 4th step, plus the reset.
    assert frames.shape == (1 + 1000 // 4, 240, 320, 3), frames.shape
    assert frames.std() > 10  # not a blank image
    assert np.abs(np.diff(frames.astype(np.int16), axis=0)).mean(axis=(1, 2, 3)).max() > 1  # it moves
    events = [r for r in loggers.read_jsonl(os.path.join(logdir, loggers.JSONL_NAME), "driver")
              if r.get("event") == "eval_video"]
    assert [e["frames"] for e in events] == [len(frames)]
    gifs = [(v.image.width, v.image.height, v.image.encoded_image_string[:6])
            for path in glob.glob(os.path.join(logdir, "tb", "evaluator", "events.*"))
            for event in tf.compat.v1.train.summary_iterator(path)
            for v in event.summary.value if v.tag == "eval_video"]
    assert gifs == [(160, 120, b"GIF89a")]


def test_run_writes_logs_checkpoint_and_run_info(first_run):
    logdir, summary = first_run
    step = summary["learner_steps"]
    assert summary["checkpoint"].endswith(f"ckpt-{step}")
    assert os.path.exists(os.path.join(logdir, "checkpoints", f"ckpt-{step}.index"))
    saved = counters.load_counters(logdir, step)
    assert saved["actor_steps"] == summary["actor_steps"]
    for role in ("actor", "learner", "evaluator"):
        assert any(name.startswith("events.out.tfevents")
                   for name in os.listdir(os.path.join(logdir, "tb", role))), role
        assert loggers.read_jsonl(os.path.join(logdir, loggers.JSONL_NAME), role), role
    texts = [tf.make_ndarray(v.tensor).item().decode()
             for path in glob.glob(os.path.join(logdir, "tb", "learner", "events.*"))
             for event in tf.compat.v1.train.summary_iterator(path)
             for v in event.summary.value if v.tag == "config"]
    assert len(texts) == 1 and "| `env` | cartpole:swingup |" in texts[0], texts
    assert f"| `agent.samples_per_insert` | {SMALL.samples_per_insert} |" in texts[0], texts
    actor_records = loggers.read_jsonl(os.path.join(logdir, loggers.JSONL_NAME), "actor")
    assert {r["actor_index"] for r in actor_records} == {0, 1}
    assert any("episode_return" in r for r in actor_records)
    assert all(0.0 <= r["time_env_fraction"] <= 1.0 for r in actor_records)
    learner_records = loggers.read_jsonl(os.path.join(logdir, loggers.JSONL_NAME), "learner")
    assert any("samples_per_insert" in r and "replay_size" in r for r in learner_records)
    # The last train call's metrics are logged too, not only those a periodic record caught.
    assert learner_records[-1]["step"] == step and "critic_loss" in learner_records[-1], learner_records[-1]
    # The learner's bottleneck timing: the share of its time spent waiting for batches.
    waits = [r["learner_input_wait_fraction"] for r in learner_records if "learner_input_wait_fraction" in r]
    assert waits and all(0.0 <= w <= 1.0 for w in waits)
    with open(os.path.join(logdir, "run_info.json")) as f:
        info = json.load(f)
    assert info["config"]["env"] == ENV and info["config"]["num_actors"] == 2
    # The evaluator acts with an actor the learner built: it never imports TensorFlow.
    placed = info["node_placement"]
    assert placed["evaluator"]["tensorflow"] is False and placed["learner"]["tensorflow"] is True, placed
    assert info["config"]["agent"]["global_batch_size"] == SMALL.global_batch_size
    assert info["git_sha"] and info["versions"]["ray"]
    assert info["agent"] == "d4pg"  # the registered agent whose builder it ran
    # Actors act in NumPy and write through reverb_client: only the learner's process imports TensorFlow.
    imported = {name: where["tensorflow"] for name, where in info["node_placement"].items()}
    acting = sorted(name for name in imported if name.startswith(("actor", "evaluator")))
    assert imported["learner"] and acting == ["actor 0", "actor 1", "evaluator"], imported
    assert not any(imported[name] for name in acting), imported
    # Start-up, seconds from the driver's launch: each milestone after the one it needs.
    up = info["startup_s"]
    assert set(up) == {"ray_up", "replay_ready", "learner_ready", "first_actor_step", "first_learner_step"}
    assert 0 < up["ray_up"] <= up["replay_ready"] <= up["learner_ready"] <= up["first_learner_step"], up
    assert up["ray_up"] < up["first_actor_step"] < up["first_learner_step"], up  # learning waits for inserts
    # The learner's own path, in the order it is walked, ending with the replay and learner milestones.
    path = info["learner_startup_s"]
    # (Ray may hand the learner a worker process it started before it was asked.)
    assert [k for k in sorted(path, key=path.get) if k != "process_started"] == [
        "launch_requested", "init_entered", "tensorflow_imported", "replay_ready", "learner_built", "init_done",
        "first_step_traced"], path
    # The first step's trace ran while the learner waited (Learner.trace), before its first step.
    assert path["first_step_traced"] <= up["first_learner_step"], (path, up)
    assert up["ray_up"] <= path["launch_requested"]
    assert path["replay_ready"] == pytest.approx(up["replay_ready"], abs=2e-3)
    assert path["init_done"] <= up["learner_ready"], (path, up)
    # The CPU-seconds behind the steps (bench/startup.py's path floor): each a thread's own, so
    # above zero and within the wall time of its step (timestamps rounded to 1 ms, hence the slack).
    cpu, slack = info["learner_startup_cpu_s"], 5e-3
    walls = {"tensorflow_import": path["tensorflow_imported"] - path["init_entered"],
             "build": path["init_done"] - path["tensorflow_imported"],
             "first_step_trace": path["first_step_traced"] - path["init_done"]}
    assert set(cpu) == {"boot", *walls} and 0 < cpu["boot"] < path["init_entered"], (cpu, path)
    assert all(0 < cpu[step] <= wall + slack for step, wall in walls.items()), (cpu, walls)
    # The evaluator is started only after the learner's first step, so its start does not share the
    # CPU with the learner's: its constructor began after that step (seconds from launch, as above).
    launched = placed["learner"]["init_entered"] - path["init_entered"]
    assert placed["evaluator"]["init_entered"] - launched > up["first_learner_step"], (placed, path, up)


def test_actors_are_seeded_distinctly_and_deterministically(first_run):
    logdir, summary = first_run
    expected = [seeding.actor_seed(SEED, i) for i in range(2)]
    assert summary["actor_seeds"] == expected
    assert len(set(expected)) == 2
    with open(os.path.join(logdir, "run_info.json")) as f:
        assert json.load(f)["actor_seeds"] == expected


def _cmdline(proc) -> str:
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def _kill_when_busy(prefix: str, stop: threading.Event, killed: list) -> None:
    """SIGKILLs the first worker whose title starts with ``prefix`` (a real crash).

    Waits until some actor is running a chunk, so the run is under way.
    """
    me = psutil.Process()
    while not stop.is_set():
        titles = {proc: _cmdline(proc) for proc in me.children(recursive=True)}
        if any(t.startswith("ray::ActorWorker.run_steps") for t in titles.values()):
            for proc, title in titles.items():
                if title.startswith(prefix):
                    proc.send_signal(signal.SIGKILL)
                    killed.append(proc.pid)
                    return
        time.sleep(0.2)


def _run_while_killing(prefix: str, builder=BUILDER, num_actors=2, layout=LAYOUT, stop_event=None, **kwargs):
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_when_busy, args=(prefix, stop, killed), daemon=True)
    killer.start()
    try:
        experiment = runners.Experiment(builder, ENV, num_actors=num_actors, seed=SEED, **SCHEDULE, **kwargs)
        return runners.run_on_ray(experiment, layout, stop_event=stop_event), killed
    finally:
        stop.set()
        killer.join(5)


# Bound on kill -> the replacement's first chunk done. That took 10 s on this
# 2-core box at load 3 and 36 s at load 25 (a new process imports TF, builds
# its environment and pulls weights, then runs a chunk); the bound only keeps
# a broken restart from hanging the test.
RESTART_BOUND_S = 240


def _stop_once_the_killed_actor_acted(jsonl: str, stop: threading.Event, outcome: dict) -> None:
    """Sets ``stop`` once an actor that failed has finished a chunk after its failure.

    The evidence is the run's own log: the driver's ``actor_failed`` record
    names the actor, and an ``actor`` record of that index written later is a
    chunk its new process ran. Gives up (and sets ``stop``) after
    ``RESTART_BOUND_S`` from the failure, or from the start if nothing fails.
    """
    deadline = time.monotonic() + RESTART_BOUND_S + 120  # + start-up before the kill
    while not stop.is_set():
        failed = [r for r in loggers.read_jsonl(jsonl, "driver") if r.get("event") == "actor_failed"]
        if failed and "failed_at" not in outcome:
            outcome["failed_at"] = time.monotonic()
            deadline = outcome["failed_at"] + RESTART_BOUND_S
        if failed and any(r["actor_index"] == failed[0]["actor_index"]
                          and r["wall_time"] > failed[0]["wall_time"]
                          for r in loggers.read_jsonl(jsonl, "actor")):
            outcome["acted_after_s"] = time.monotonic() - outcome["failed_at"]
            stop.set()
        elif time.monotonic() > deadline:
            outcome["timed_out"] = True
            stop.set()
        time.sleep(0.5)


def _actor_events(logdir):
    """The driver's actor events (failed, back); it also logs others (learner_first_step, ...)."""
    return [r for r in loggers.read_jsonl(os.path.join(logdir, loggers.JSONL_NAME), "driver")
            if r.get("event") in ("actor_failed", "actor_back")]


def test_resume_continues_and_a_killed_actor_is_restarted(first_run):
    logdir, first = first_run
    # No step budget to race against the restart: the run goes on until the
    # killed actor's replacement has finished a chunk, then stops on request
    # exactly as at --max-actor-steps. Its length follows the machine's speed.
    stop, outcome = threading.Event(), {}
    watcher = threading.Thread(target=_stop_once_the_killed_actor_acted, daemon=True,
                               args=(os.path.join(logdir, loggers.JSONL_NAME), stop, outcome))
    watcher.start()
    try:
        summary, killed = _run_while_killing("ray::ActorWorker.run_steps", logdir=logdir, resume=True,
                                             max_actor_steps=FIRST_STEPS + 10_000_000, layout=LAYOUT,
                                             stop_event=stop)
    finally:
        stop.set()
        watcher.join(5)
    assert killed, "no busy actor process was found to kill"
    assert not outcome.get("timed_out"), (
        f"the killed actor's replacement finished no chunk within {RESTART_BOUND_S}s of the failure "
        f"(failure seen: {'failed_at' in outcome}); actors: {summary['actors']}")
    assert summary["stop_reason"] == "stop_event"
    # One kill is one restart, counted once, and the replacement ran chunks.
    assert summary["actor_restarts"] == first["actor_restarts"] + 1 == 1
    restarted = [a for a in summary["actors"] if a["restarts"]]
    assert len(restarted) == 1 and restarted[0]["chunks_after_restart"] >= 1, summary["actors"]
    victim = restarted[0]
    assert not victim["given_up"] and victim["back_after_s"] > 0
    # ...with a fresh seed, so it does not replay its first life's episodes.
    assert victim["seed"] != seeding.actor_seed(SEED, victim["index"])
    # The restart is logged: the failure, then the replacement's first chunk.
    events = _actor_events(logdir)
    assert [(r["event"], r["actor_index"], r["actor_restarts"]) for r in events] == [
        ("actor_failed", victim["index"], 1), ("actor_back", victim["index"], 1)], events
    assert events[1]["init_s"] > 0 and events[1]["back_after_s"] >= events[1]["init_s"]
    # Counters continued from the checkpoint rather than restarting at zero.
    assert summary["actor_steps"] == first["actor_steps"] + sum(a["steps"] for a in summary["actors"])
    assert summary["learner_steps"] > first["learner_steps"]
    # Every actor, the replacement included, acted with weights trained after the resume.
    assert all(v > first["learner_steps"] for v in summary["actor_policy_versions"])
    with open(os.path.join(logdir, "run_info.json")) as f:
        info = json.load(f)
    assert info["resumed_from_step"] == first["learner_steps"] and info["previous"]
    assert _wait_for_free_cpus(2.0)


@dataclasses.dataclass(frozen=True)
class _CrashingBuilder(D4PGBuilder):
    """D4PG whose acting processes die at their first step (a crash loop); evaluation is fine."""

    def make_actor(self, environment_spec, variable_source, adder, actor_index, seed,
                   evaluation=False):
        actor = super().make_actor(environment_spec, variable_source, adder, actor_index, seed,
                                   evaluation=evaluation)
        return actor if evaluation else _DiesOnFirstStep(actor)


class _DiesOnFirstStep:
    """The builder's actor (weights pulled as usual), but its process exits on the first step."""

    def __init__(self, actor):
        self._actor = actor

    def __getattr__(self, name):
        return getattr(self._actor, name)

    def observe_first(self, timestep):
        del timestep
        os._exit(3)  # like a segfault: no exception, no clean-up


def test_a_crash_looping_actor_is_restarted_then_given_up_with_one_line(ray_session, tmp_path):
    del ray_session
    logdir = str(tmp_path / "run")
    crashing = _CrashingBuilder(config=SMALL, steps_per_call=4)
    # One restart allowed per 10 minutes: the first crash is restarted, the second
    # (seconds later) is a crash loop; with no actor left the run fails.
    loop_layout = dataclasses.replace(LAYOUT, actor_max_restarts=1, actor_restart_window_s=600)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    try:
        with pytest.raises(errors.RunFailedError) as info:
            runners.run_on_ray(runners.Experiment(
                crashing, ENV, num_actors=1, max_actor_steps=10_000_000, logdir=logdir, seed=SEED, **SCHEDULE),
                loop_layout)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    text = str(info.value)
    assert "\n" not in text and text.startswith(
        "every actor was given up after more than 1 restarts within 600s; last error (actor 0): "
        "its process died"), text
    events = _actor_events(logdir)
    assert [(r["event"], r["actor_index"], r["actor_restarts"], r["given_up"]) for r in events] == [
        ("actor_failed", 0, 1, False), ("actor_failed", 0, 2, True)], events
    assert _wait_for_free_cpus(2.0)


@pytest.mark.parametrize("victim, message", [
    ("ray::ReplayServer", "replay server died; "),
    ("ray::LearnerWorker", "learner failed: "),
])
def test_a_dead_replay_server_or_learner_ends_the_run_with_one_line(ray_session, tmp_path, victim,
                                                                     message):
    del ray_session
    separate_replay = dataclasses.replace(LAYOUT, colocate_replay=False)
    with pytest.raises(errors.RunFailedError) as info:  # one actor: fewer processes to start
        _run_while_killing(victim, num_actors=1, max_actor_steps=10_000_000,
                           logdir=str(tmp_path / "run"), layout=separate_replay)
    text = str(info.value)
    assert text.startswith(message) and "\n" not in text, text
    assert _wait_for_free_cpus(2.0)


def _kill_learner_after_a_trained_checkpoint(logdir, stop, killed):
    """SIGKILLs the learner once a periodic checkpoint holds trained, target-lagging weights.

    Such a checkpoint's step is > 0 and not a multiple of the target period,
    so its target networks differ from its online ones (a resume that rebuilt
    the targets from the online nets would show). ``killed``: (pid, monotonic time).
    """
    me = psutil.Process()
    path = run_dir.counters_path(logdir)
    while not stop.is_set():
        try:
            with open(path) as f:
                newest = max(int(k) for k in json.load(f))
        except (OSError, ValueError):
            newest = 0
        if newest > 0 and newest % SMALL.target_update_period:
            for proc in me.children(recursive=True):
                if _cmdline(proc).startswith("ray::LearnerWorker"):
                    proc.send_signal(signal.SIGKILL)
                    killed.append((proc.pid, time.monotonic()))
                    return
        time.sleep(0.2)


def _restored_then_saved(logdir):
    """A fresh learner process restores ``logdir``'s newest checkpoint and saves it untouched."""
    from rlplat_envs import make_environment  # pylint: disable=g-import-not-at-top
    from rlplat import specs  # pylint: disable=g-import-not-at-top
    from rlplat.distributed import process, workers  # pylint: disable=g-import-not-at-top

    with make_environment(ENV, seed=0) as environment:
        spec = specs.make_environment_spec(environment)
    learner = workers.remote(workers.LearnerWorker, num_cpus=1, max_concurrency=4, max_restarts=0,
                             runtime_env=process.runtime_env("learner", cpu_only=True, threads=1),
                             ).remote(BUILDER, spec, 1, None, logdir,
                                     restore_step=run_dir.latest_step(logdir))
    try:
        return ray.get(learner.save_checkpoint.remote(), timeout=300)
    finally:
        ray.kill(learner, no_restart=True)


@pytest.mark.slow
def test_a_killed_colocated_learner_ends_the_run_within_60s_and_resume_continues_its_state(
        ray_session, tmp_path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from resume_ratio import check_no_catch_up_burst  # pylint: disable=g-import-not-at-top
    from rlplat import replay_rules  # pylint: disable=g-import-not-at-top

    del ray_session
    logdir = str(tmp_path / "run")
    colocated = dataclasses.replace(LAYOUT, colocate_replay=True)
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_learner_after_a_trained_checkpoint,
                              args=(logdir, stop, killed), daemon=True)
    killer.start()
    try:
        with pytest.raises(errors.RunFailedError) as info:
            runners.run_on_ray(runners.Experiment(
                BUILDER, ENV, num_actors=1, max_actor_steps=10_000_000, logdir=logdir, seed=SEED,
                checkpoint_every_s=2.0, **SCHEDULE), colocated)
        ended = time.monotonic()
    finally:
        stop.set()
        killer.join(5)
    assert killed, "the learner was never killed"
    text = str(info.value)
    assert text.startswith("learner failed: ") and "\n" not in text, text
    assert ended - killed[0][1] < 60, f"the run took {ended - killed[0][1]:.0f}s to end after the kill"
    print(f"learner SIGKILL -> run_on_ray raised: {ended - killed[0][1]:.1f}s")

    # The newest (periodic) checkpoint, restored in a new process and saved
    # again without a step, is the same checkpoint: optimizer iterations and
    # slots, target networks, step counter all came back as saved.
    path = tf.train.latest_checkpoint(os.path.join(logdir, "checkpoints"))
    step = int(path.rsplit("-", 1)[1])
    # (The newest entry; an older one if the learner died between saving and answering.)
    saved_counters = counters.load_counters(logdir, step)
    assert 0 < saved_counters["learner_steps"] <= step
    copy = str(tmp_path / "copy")
    shutil.copytree(logdir, copy)
    original = tf.train.load_checkpoint(path)
    again = tf.train.load_checkpoint(_restored_then_saved(copy)["path"])
    keys = [k for k in original.get_variable_to_shape_map()
            if not k.startswith(("save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH"))]
    # Keras 2 optimizers: ``_iterations`` and the slots (Adam's m and v) as ``_variables/<i>``.
    for name in ("critic_optimizer", "policy_optimizer"):
        assert original.get_tensor(f"{name}/_iterations/.ATTRIBUTES/VARIABLE_VALUE") > 0
        assert any(k.startswith(f"{name}/_variables/") for k in keys), keys
    target = [k for k in keys if k.startswith("target_critic/")]
    online = [k.replace("target_critic/", "critic/", 1) for k in target]
    assert target and not all(np.array_equal(original.get_tensor(t), original.get_tensor(o))
                              for t, o in zip(target, online)), f"ckpt-{step}: target == online"
    for key in keys:
        np.testing.assert_array_equal(again.get_tensor(key), original.get_tensor(key), err_msg=key)

    # --resume goes on from that checkpoint, in the same metrics.jsonl.
    jsonl = os.path.join(logdir, loggers.JSONL_NAME)
    with open(jsonl) as f:
        before = f.readline()
    resumed_at = time.time()
    summary = runners.run_on_ray(runners.Experiment(
        BUILDER, ENV, num_actors=1, seed=SEED, logdir=logdir, resume=True,
        max_actor_steps=saved_counters["actor_steps"] + 1000, **SCHEDULE), LAYOUT)
    assert summary["actor_steps"] == saved_counters["actor_steps"] + sum(
        a["steps"] for a in summary["actors"])
    assert summary["learner_steps"] > step
    with open(os.path.join(logdir, "run_info.json")) as f:
        assert json.load(f)["resumed_from_step"] == step
    with open(jsonl) as f:
        assert f.readline() == before  # appended to, not replaced
    records = loggers.read_jsonl(jsonl)
    assert any(r["wall_time"] < resumed_at for r in records)
    # No catch-up burst on the new, empty replay: a fresh warm-up, then the ratio.
    first_step = [r for r in records if r.get("event") == "learner_first_step"
                  and r["wall_time"] > resumed_at]
    assert first_step and first_step[0]["replay_inserts_before_first_step"] >= SMALL.min_replay_size
    learner = [r for r in records if r.get("role") == "learner" and r["wall_time"] > resumed_at]
    check_no_catch_up_burst(learner, restored_step=step, spi=SMALL.samples_per_insert,
                            min_size=SMALL.min_replay_size, batch=SMALL.global_batch_size,
                            buffer=replay_rules.default_error_buffer(
                                SMALL.samples_per_insert, SMALL.min_replay_size,
                                SMALL.global_batch_size, 1))
    assert _wait_for_free_cpus(2.0)



@dataclasses.dataclass(frozen=True)
class _FaultyEnvBuilder(D4PGBuilder):
    """D4PG whose acting (not evaluating) actors make the REAL environment fail.

    At every ``every``-th step of an episode the actor sends a NaN control
    (``fault="nan"``: MuJoCo flags it, dm_control raises PhysicsError) or a
    wrong-shaped action (``fault="shape"``: dm_control raises ValueError).
    """

    fault: str = "nan"
    every: int = 7

    def make_actor(self, environment_spec, variable_source, adder, actor_index, seed,
                   evaluation=False):
        actor = super().make_actor(environment_spec, variable_source, adder, actor_index, seed,
                                   evaluation=evaluation)
        return actor if evaluation else _BadActions(actor, self.fault, self.every)


class _BadActions:
    def __init__(self, actor, fault, every):
        self._actor, self._fault, self._every, self._t = actor, fault, every, 0

    def __getattr__(self, name):
        return getattr(self._actor, name)

    def observe_first(self, timestep):
        self._t = 0
        self._actor.observe_first(timestep)

    def select_action(self, observation):
        self._t += 1
        action = self._actor.select_action(observation)
        if self._t % self._every:
            return action
        return np.full_like(action, np.nan) if self._fault == "nan" else np.concatenate([action] * 2)

    def observe(self, action, next_timestep):
        # Replay gets a well-formed action, whatever the environment was sent
        # (a real divergence comes with a finite action).
        self._actor.observe(np.nan_to_num(np.asarray(action, np.float32)[:1]), next_timestep)


def _run_faulty(builder, logdir):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    try:
        return runners.run_on_ray(runners.Experiment(
            builder, ENV, num_actors=1, max_actor_steps=2_000, logdir=logdir, seed=SEED, **SCHEDULE), LAYOUT)
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("fault", ["nan", "shape"])
def test_environment_faults_end_episodes_are_counted_and_logged_and_the_run_goes_on(
        ray_session, tmp_path, fault):
    del ray_session
    logdir = str(tmp_path / "run")
    # Other errors are bounded (EnvironmentLoop's max_env_errors, 100): fewer of them.
    every = 7 if fault == "nan" else 50
    summary = _run_faulty(_FaultyEnvBuilder(config=SMALL, steps_per_call=4, fault=fault,
                                            every=every), logdir)
    # Every episode ends at its every-th step, by the fault; the actor was never restarted.
    counted = summary["physics_errors"] if fault == "nan" else summary["env_errors"]
    other = summary["env_errors"] if fault == "nan" else summary["physics_errors"]
    assert counted == summary["episodes"] == summary["actor_steps"] // every and other == 0, summary
    assert summary["actor_restarts"] == 0 and summary["actor_steps"] >= 2_000
    records = loggers.read_jsonl(os.path.join(logdir, loggers.JSONL_NAME))
    actors = [r for r in records if r.get("role") == "actor"]
    assert actors[-1]["physics_errors" if fault == "nan" else "env_errors"] == counted
    events = [r for r in records if r.get("event") == "env_error"]
    if fault == "nan":
        assert events == []
    else:  # logged once, with the environment's own traceback
        assert len(events) == 1 and events[0]["actor_index"] == 0, events
        text = events[0]["traceback"]
        assert text.startswith("environment step raised ValueError") and "Traceback" in text
        assert "shape" in text


def test_two_replay_shards_split_the_actors_and_keep_samples_per_insert_over_both(ray_session, tmp_path):
    """--num-replay-shards 2: two real servers, one actor (of 2 environments) each, equal sampling, the ratio
    held overall."""
    del ray_session
    from rlplat import replay_rules

    num_shards, actor_steps = 2, 3000
    summary = runners.run_on_ray(runners.Experiment(
        BUILDER, ENV, num_actors=2, max_actor_steps=actor_steps, logdir=str(tmp_path / "run"), seed=SEED,
        **SCHEDULE), dataclasses.replace(LAYOUT, num_replay_shards=num_shards, envs_per_actor=2))
    addresses = summary.details["replay_address"].split(",")
    shards = summary.details["replay_shards"]
    assert len(set(addresses)) == num_shards and len(shards) == num_shards, summary.details
    assert summary.learner_steps > 0 and summary.actor_steps >= actor_steps
    inserts = [s["replay_inserts"] for s in shards]
    samples = [s["replay_samples"] for s in shards]
    # Actor i wrote to shard i % 2 only: each shard holds one actor's share. Each of the
    # 4 environments is a stream of its own: one n-step transition per env step, but for
    # the n - 1 steps each stream still holds and the items its writer had not yet
    # confirmed (at most max_pending_items) when the actors were stopped.
    assert min(inserts) >= 0.3 * sum(inserts), inserts
    unwritten = 4 * (SMALL.n_step - 1 + MAX_PENDING_ITEMS)
    assert sum(inserts) >= summary.actor_steps - unwritten, (inserts, summary.actor_steps)
    # Every batch takes half from each shard; only the samples in flight may differ.
    batch = SMALL.global_batch_size
    assert min(samples) > 0 and abs(samples[0] - samples[1]) <= 8 * batch, samples
    # Globally: each shard's limiter keeps |samples - spi * (inserts - min_size)| within
    # its error buffer (+ one insert's worth), so the sums stay within S times that.
    spi, min_size = SMALL.samples_per_insert, SMALL.min_replay_size
    error_buffer = replay_rules.default_error_buffer(spi, min_size, batch, 1)
    slack = num_shards * (error_buffer + spi)
    assert abs(sum(samples) - spi * (sum(inserts) - num_shards * min_size)) <= slack, (inserts, samples)
    assert summary.samples_per_insert == pytest.approx(sum(samples) / sum(inserts))
    # Each server's process CPU goes into the learner records: what replay costs, shard by shard.
    with open(tmp_path / "run" / "metrics.jsonl", encoding="utf-8") as f:
        cpu = [r for r in map(json.loads, f) if r.get("role") == "learner" and "replay_server_cpu_s" in r]
    assert len(cpu) >= 2, "no learner record carries the replay servers' CPU"
    for r in cpu:
        assert r["replay_server_cpu_s"] == pytest.approx(r["replay_shard0_cpu_s"] + r["replay_shard1_cpu_s"])
    assert 0 < cpu[0]["replay_server_cpu_s"] < cpu[-1]["replay_server_cpu_s"]
    print(f"shards {addresses}: inserts {inserts}, samples {samples}, run SPI {summary.samples_per_insert:.2f} "
          f"(limiter {spi:g}, bound +-{slack:.0f} samples)")


def test_impala_vector_actors_on_two_shards_write_every_environments_frames(ray_session, tmp_path):
    """--envs-per-actor 4 through ActorWorker (IMPALA's vector actor), 2 actors on 2 replay shards."""
    del ray_session
    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig

    unroll, envs, frames = 10, 4, 8000
    builder = IMPALABuilder(config=IMPALAConfig(layer_sizes=(16,), global_batch_size=4, unroll_length=unroll))
    summary = runners.run_on_ray(runners.Experiment(
        builder, "gym:CartPole-v1", num_actors=2, max_actor_steps=frames, logdir=str(tmp_path / "run"), seed=SEED,
        **SCHEDULE), dataclasses.replace(LAYOUT, num_replay_shards=2, envs_per_actor=envs))
    shards = summary.details["replay_shards"]
    inserts = [s["replay_inserts"] for s in shards]
    assert summary.actor_steps >= frames and summary.learner_steps > 0, summary
    # Every frame of every environment is in some unroll of T frames: at least frames / T
    # unrolls (more where episodes end mid-unroll); dropping 3 of 4 environments would
    # leave about a quarter of that.
    assert sum(inserts) >= summary.actor_steps / unroll, (inserts, summary.actor_steps)
    assert min(inserts) >= 0.3 * sum(inserts), inserts  # each actor's stream went to its own shard
    # A queue hands each unroll out once: the learner took what the actors wrote, no more.
    assert all(0 < s["replay_samples"] <= s["replay_inserts"] for s in shards), shards
    assert summary.episodes >= summary.actor_steps / 500, summary.episodes  # CartPole ends by 500 frames
    print(f"IMPALA x{envs} envs per actor: {summary.actor_steps} frames, {summary.episodes} episodes, "
          f"unrolls per shard {inserts}, sampled {[s['replay_samples'] for s in shards]}")
