"""LearnerGroup: W=2 D4PG learner processes under MultiWorkerMirroredStrategy on loopback.

One group of two Ray actors (a real local Ray instance, real TF collectives
over gRPC on 127.0.0.1) is built once and trained on FIXED batches, so the
same data can be replayed in this process on one device:

- after every step both workers hold identical weights (every variable);
- after K steps they equal a one-process learner fed the same global
  batches (each worker took half of each batch);
- a group checkpoint leaves only the chief's file, which restores under one
  replica;
- a worker that dies makes the next call fail at once with one line.

The fixed-data builder is defined here and shipped to the workers by value
(this module is not importable in Ray's worker processes).
"""

import dataclasses
import json
import os
import re
import sys
import time

import numpy as np
import pytest
import ray
import tensorflow as tf
from dm_env import specs

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat import replication
from rlplat.distributed import cluster
from rlplat.distributed import learner_group
from rlplat.replay.types import Transition
from rlplat.specs import EnvironmentSpec
from rlplat.utils import checkpointing

pytestmark = pytest.mark.multiprocess

OBS, ACT = 5, 2
SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32, "observations"),
    actions=specs.BoundedArray((ACT,), np.float32, -1.0, 1.0, "actions"),
    rewards=specs.Array((), np.float32), discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))
CONFIG = D4PGConfig(policy_layer_sizes=(16, 16), critic_layer_sizes=(16, 16), num_atoms=11,
                    v_min=-10.0, v_max=10.0, global_batch_size=8, min_replay_size=8,
                    policy_learning_rate=1e-2, critic_learning_rate=1e-2, target_update_period=3)
NUM_BATCHES = 4
NUM_STEPS = 6  # > NUM_BATCHES (the data wraps) and > target_update_period (targets are copied)
# Long enough for the two builds' skew (variable creation is a collective), short for the test.
COLLECTIVE_TIMEOUT_S = 20


def _fixed_rows(num_rows: int) -> Transition:
    rng = np.random.default_rng(7)
    return Transition(
        observation=rng.normal(size=(num_rows, OBS)).astype(np.float32),
        action=rng.uniform(-1, 1, (num_rows, ACT)).astype(np.float32),
        reward=rng.uniform(0, 2, num_rows).astype(np.float32),
        discount=np.where(rng.uniform(size=num_rows) < 0.2, 0.0, 0.95).astype(np.float32),
        next_observation=rng.normal(size=(num_rows, OBS)).astype(np.float32))


def _set_fixed_weights(learner) -> None:
    """Same initial weights in every process (Glorot-scaled, from a fixed NumPy seed)."""
    rng = np.random.default_rng(3)
    for online, target in ((learner.policy, learner.target_policy),
                           (learner.critic, learner.target_critic)):
        for src, dst in zip(online.variables, target.variables):
            if len(src.shape) == 2:
                limit = np.sqrt(6.0 / sum(src.shape))
                value = rng.uniform(-limit, limit, src.shape).astype(np.float32)
                src.assign(value)
                dst.assign(value)


@dataclasses.dataclass(frozen=True)
class FixedDataBuilder(D4PGBuilder):
    """D4PG whose learner trains on the same GLOBAL batches, in order, in every layout.

    Input pipeline i of P takes rows [i*b, (i+1)*b) of each global batch (b its
    per-replica size), so P workers together see exactly the global batch.
    """

    def make_learner(self, environment_spec, replicator, replay_address, logdir=None):
        del replay_address, logdir
        from rlplat_agents.d4pg.learning import D4PGLearner  # pylint: disable=g-import-not-at-top

        global_batch = self.config.global_batch_size
        rows = _fixed_rows(global_batch * NUM_BATCHES)

        def input_fn(ctx):
            per_replica = ctx.get_per_replica_batch_size(global_batch)
            start = ctx.input_pipeline_id * per_replica
            ds = tf.data.Dataset.from_tensor_slices(rows).batch(global_batch, drop_remainder=True)
            ds = ds.map(lambda batch: Transition(*[f[start:start + per_replica] for f in batch]))
            return ds.repeat()

        learner = D4PGLearner(self.config, environment_spec, replicator,
                              replicator.distribute(input_fn), steps_per_call=self.steps_per_call)
        _set_fixed_weights(learner)
        return learner


BUILDER = FixedDataBuilder(config=CONFIG, steps_per_call=1)


def _flat(state):
    return [a for name in sorted(state) for a in state[name]]


@pytest.fixture(scope="module")
def ray_session():
    connection = cluster.connect(num_cpus=2)
    # Ray workers cannot import this test module; ship what it defines by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield connection
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    cluster.disconnect(connection)


@pytest.fixture(scope="module")
def trained_group(ray_session, tmp_path_factory):
    """A W=2 group trained NUM_STEPS single steps; the states seen after each step."""
    del ray_session
    logdir = str(tmp_path_factory.mktemp("group"))
    group = learner_group.LearnerGroup(
        BUILDER, SPEC, 2, "127.0.0.1:1", logdir, num_cpus=0.5, build_timeout_s=240,
        call_timeout_s=60, train_timeout_s=120, collective_timeout_s=COLLECTIVE_TIMEOUT_S)
    history = [group.member_states()]
    losses = []
    for _ in range(NUM_STEPS):
        losses.append(group.train(1)["critic_loss"])
        history.append(group.member_states())
    yield group, history, losses, logdir
    group.shutdown()


def test_workers_hold_identical_weights_after_every_step(trained_group):
    group, history, _, _ = trained_group
    ready = group.ready()
    assert ready["num_workers"] == 2 and ready["num_replicas"] == 2
    assert [w["is_chief"] for w in ready["workers"]] == [True, False]
    assert len({w["pid"] for w in ready["workers"]}) == 2
    for step, states in enumerate(history):
        (step0, state0), (step1, state1) = states
        assert step0 == step1 == step
        for a, b in zip(_flat(state0), _flat(state1)):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    # The weights did move (equal-but-frozen workers would pass the loop above).
    first, last = _flat(history[0][0][1]), _flat(history[-1][0][1])
    assert max(np.abs(a - b).max() for a, b in zip(first, last)) > 1e-3


def _one_process_learner():
    learner = BUILDER.make_learner(SPEC, replication.make_replicator(1), None)
    return learner


def _learner_state(learner):
    out = {}
    for name, thing in learner.checkpointables().items():
        variables = getattr(thing, "variables", None)
        out[name] = [np.array(thing.numpy())] if variables is None else [v.numpy() for v in variables]
    return out


def test_two_workers_match_one_process_on_the_same_data(trained_group):
    _, history, losses, _ = trained_group
    learner = _one_process_learner()
    np.testing.assert_allclose(  # Same start: the fixed weights, not each process's random ones.
        _flat(_learner_state(learner))[0], _flat(history[0][0][1])[0], rtol=0, atol=0)
    reference_losses = [learner.step()["critic_loss"] for _ in range(NUM_STEPS)]
    assert learner.num_steps == NUM_STEPS
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-5, atol=1e-5)
    for a, b in zip(_flat(history[-1][0][1]), _flat(_learner_state(learner))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_only_the_chief_keeps_the_checkpoint_and_it_restores_on_one_replica(trained_group):
    group, history, _, logdir = trained_group
    saved = group.save_checkpoint(60)
    directory = os.path.join(logdir, "checkpoints")
    assert saved["step"] == NUM_STEPS and saved["path"] == os.path.join(directory, f"ckpt-{NUM_STEPS}")
    assert sorted(os.listdir(directory)) == [
        "checkpoint", f"ckpt-{NUM_STEPS}.data-00000-of-00001", f"ckpt-{NUM_STEPS}.index",
        f"ckpt-{NUM_STEPS}.manifest.json"]

    learner = _one_process_learner()
    restorer = checkpointing.Checkpointer(directory, **learner.checkpointables())
    assert restorer.restore_latest() == NUM_STEPS
    assert learner.num_steps == NUM_STEPS
    for a, b in zip(_flat(history[-1][0][1]), _flat(_learner_state(learner))):
        np.testing.assert_array_equal(a, b)


def test_a_worker_alone_in_a_step_times_out_instead_of_hanging(trained_group):
    # Runs after the tests above (it leaves worker 0's collectives aborted).
    group = trained_group[0]
    start = time.monotonic()
    with pytest.raises(ray.exceptions.RayTaskError, match="DeadlineExceeded"):
        ray.get(group.members[0].train.remote(1), timeout=COLLECTIVE_TIMEOUT_S + 60)
    assert COLLECTIVE_TIMEOUT_S - 1 <= time.monotonic() - start < COLLECTIVE_TIMEOUT_S + 30


def test_a_dead_worker_fails_the_group_at_once_with_one_line(trained_group):
    # Runs last in this module: it ends the shared group.
    group = trained_group[0]
    ray.kill(group.members[1], no_restart=True)
    start = time.monotonic()
    with pytest.raises(learner_group.LearnerGroupError) as info:
        group.train(1)
    assert time.monotonic() - start < 60  # well under train_timeout_s: nobody waited it out
    message = str(info.value)
    # Worker 0 (aborted by the test above) may report first; either way one line naming it.
    assert "\n" not in message and re.search(r"worker [01] of 2 failed", message), message
    for member in group.members:  # the group killed the survivor too
        # ray.kill is asynchronous: a call sent right after it may still be
        # served, so the member must be gone within a bound, not at once.
        deadline = time.monotonic() + 30
        with pytest.raises(ray.exceptions.RayActorError):
            while time.monotonic() < deadline:
                ray.get(member.address.remote(), timeout=30)
                time.sleep(0.2)
    with pytest.raises(learner_group.LearnerGroupError):  # the group stays failed
        group.get_variables_if_newer(["policy"], -1)


def test_group_arguments_are_validated():
    with pytest.raises(ValueError, match="num_workers >= 2"):
        learner_group.LearnerGroup(BUILDER, SPEC, 1, "127.0.0.1:1", "/tmp/x")
    with pytest.raises(ValueError, match="colocate_replay=False"):
        learner_group.LearnerGroup(BUILDER, SPEC, 2, None, "/tmp/x")
    with pytest.raises(ValueError, match="member_options has 1 entries for 2 workers"):
        learner_group.LearnerGroup(BUILDER, SPEC, 2, "127.0.0.1:1", "/tmp/x", member_options=[{}])
    configs = learner_group.make_tf_configs(["a:1", "b:2"])
    assert configs[1] == {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}


def _real_builder(samples_per_insert: float):
    from rlplat_agents.d4pg.builder import D4PGBuilder as RealBuilder  # pylint: disable=g-import-not-at-top

    config = D4PGConfig(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), num_atoms=11,
                        global_batch_size=32, min_replay_size=200, samples_per_insert=samples_per_insert,
                        max_replay_size=10_000, variable_update_period=100)
    return RealBuilder(config=config, steps_per_call=4)


def _group_layout():
    from rlplat import runners  # pylint: disable=g-import-not-at-top

    return runners.RayLayoutConfig(num_learner_workers=2, actor_chunk_steps=400, learner_chunk_steps=8,
                                   console_every_s=1.0, console=False, stop_timeout_s=60,
                                   learner_stall_timeout_s=180)


GROUP_SCHEDULE = dict(eval_every_actor_steps=0, eval_episodes=1)


def _wait_for_free_cpus(expected: float, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0) < expected and time.monotonic() < deadline:
        time.sleep(0.5)
    return ray.available_resources().get("CPU", 0) >= expected


def _checkpoint_files(logdir):
    """Every file under ``logdir`` that belongs to a TF checkpoint, relative to it."""
    found = []
    for root, _, files in os.walk(logdir):
        for name in files:
            if name == "checkpoint" or name.startswith("ckpt-"):
                found.append(os.path.relpath(os.path.join(root, name), logdir))
    return sorted(found)


def _chief_files(steps):
    return sorted(["checkpoints/checkpoint"] + [f"checkpoints/ckpt-{s}.{ext}" for s in steps
                                                  for ext in ("index", "data-00000-of-00001",
                                                              "manifest.json")])


@pytest.fixture(scope="module")
def group_run(ray_session, tmp_path_factory):
    """One short run_on_ray with W=2 learner workers, stopped at FIRST_ACTOR_STEPS."""
    del ray_session
    from rlplat import runners  # pylint: disable=g-import-not-at-top

    logdir = str(tmp_path_factory.mktemp("group_run") / "run")
    summary = runners.run_on_ray(runners.Experiment(
        _real_builder(4.0), "cartpole:swingup", num_actors=1, max_actor_steps=FIRST_ACTOR_STEPS, logdir=logdir,
        seed=3, **GROUP_SCHEDULE), _group_layout())
    return logdir, summary


FIRST_ACTOR_STEPS = 1200


@pytest.mark.slow
def test_run_on_ray_with_two_learner_workers_finishes(group_run):
    logdir, summary = group_run
    assert summary["actor_steps"] >= FIRST_ACTOR_STEPS
    # samples_per_insert 4 at global batch 32: about 4 * (1200 - 200) / 32 = 125 steps.
    assert summary["learner_steps"] >= 40
    assert summary["colocate_replay"] is False and summary["learner_workers"] == 2
    assert summary["checkpoint"] == os.path.join(logdir, "checkpoints", f"ckpt-{summary['learner_steps']}")
    assert summary["eval_policy_version"] == summary["learner_steps"]
    # Each learner worker has its own placement record: two processes, the chief first.
    where = summary["node_placement"]
    workers_seen = [where[f"learner worker {i}"] for i in range(2)]
    assert [(w["worker_index"], w["is_chief"]) for w in workers_seen] == [(0, True), (1, False)]
    pids = {w["pid"] for w in workers_seen} | {where["learner group"]["pid"], where["replay"]["pid"]}
    assert len(pids) == 4  # two learner processes, apart from the group actor and replay
    assert "learner" not in where  # the group actor is not reported as "the learner"
    # Killing the group actor ended its workers too: every CPU is free again.
    assert _wait_for_free_cpus(2.0), ray.available_resources()


@pytest.mark.slow
def test_run_with_two_learner_workers_resumes_from_the_chiefs_checkpoint(group_run):
    from rlplat import runners  # pylint: disable=g-import-not-at-top
    from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top

    logdir, first = group_run
    first_steps = first["learner_steps"]
    assert _checkpoint_files(logdir) == _chief_files([first_steps])
    total = FIRST_ACTOR_STEPS + 600
    resumed_at = time.time()
    summary = runners.run_on_ray(runners.Experiment(
        _real_builder(4.0), "cartpole:swingup", num_actors=1, max_actor_steps=total, logdir=logdir, seed=3,
        resume=True, **GROUP_SCHEDULE), _group_layout())
    assert summary["learner_workers"] == 2
    # Counters continued from the checkpoint: 600 more actor steps at samples_per_insert 4
    # are ~75 learner steps (replay is refilled to min_replay_size 200 first: >= 40).
    assert summary["actor_steps"] >= total
    assert first_steps + 20 <= summary["learner_steps"] <= first_steps + 150
    with open(os.path.join(logdir, "run_info.json"), encoding="utf-8") as f:
        assert json.load(f)["resumed_from_step"] == first_steps
    # The resumed learner started at the checkpoint's step: its records begin
    # there (within a few train chunks), never back at zero.
    steps = [r["step"] for r in loggers.read_jsonl(os.path.join(logdir, loggers.JSONL_NAME), "learner")
             if r["wall_time"] >= resumed_at]
    assert steps and first_steps <= min(steps) <= first_steps + 40, steps
    assert all(v > first_steps for v in summary["actor_policy_versions"])
    # Only the chief wrote checkpoint files, and nothing else landed in the logdir.
    assert _checkpoint_files(logdir) == _chief_files([first_steps, summary["learner_steps"]])
    assert _wait_for_free_cpus(2.0), ray.available_resources()


def test_layout_refuses_what_a_learner_group_cannot_do():
    from rlplat_agents.d4pg.builder import D4PGBuilder as RealBuilder  # pylint: disable=g-import-not-at-top
    from rlplat import runners  # pylint: disable=g-import-not-at-top

    with pytest.raises(ValueError, match="num_learner_workers must be >= 1"):
        runners.RayLayoutConfig(num_learner_workers=0)
    with pytest.raises(ValueError, match="replay in its own process"):
        runners.RayLayoutConfig(num_learner_workers=2, colocate_replay=True)
    two = runners.RayLayoutConfig(num_learner_workers=2)
    with pytest.raises(ValueError, match="drop num_learner_replicas"):  # field names; the CLI says flags
        dataclasses.replace(two, num_learner_replicas=2)
    with pytest.raises(ValueError, match="multiple of 3 such as 255"):
        runners.run_on_ray(runners.Experiment(RealBuilder(), "cartpole:swingup"),
                           runners.RayLayoutConfig(num_learner_workers=3))


@pytest.mark.parametrize("args, fragment", [
    (["--num-learner-workers", "0"], "--num-learner-workers must be >= 1"),
    (["--num-learner-workers", "2", "--num-learner-replicas", "2"], "drop --num-learner-replicas"),
])
def test_cli_rejects_bad_learner_worker_flags_with_one_line(args, fragment):
    import subprocess  # pylint: disable=g-import-not-at-top

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-m", "rlplat.launch.cli", "train", "d4pg", *args],
                            env=env, capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("rlplat: error: ") and fragment in lines[0], result.stderr
