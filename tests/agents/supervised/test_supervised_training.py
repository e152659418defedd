"""Learning, replica-count invariance, resume and Ctrl-C for the digits workload."""

import os

import numpy as np
import pytest

from rlplat import run_dir
from rlplat_agents.supervised import data, learning, train
from rlplat_agents.supervised.config import SupervisedConfig
from rlplat import replication
from rlplat.utils import checkpointing, loggers


def _train_learner(num_replicas, num_steps, eager=False, **config_changes):
    config = SupervisedConfig(num_steps=num_steps, **config_changes)
    repl = replication.make_replicator(num_replicas=num_replicas, eager=eager)
    learner = learning.SupervisedLearner(config, repl)
    batches = repl.distribute(data.make_input_fn(config.global_batch_size, config.seed))
    learner.train(batches, num_steps)
    return learner


def _weights(learner):
    return [v.numpy() for v in learner.model.variables]


@pytest.mark.slow
def test_two_replicas_reach_97_percent_held_out(tmp_path):
    config = SupervisedConfig(num_steps=300, eval_period=100, checkpoint_period=300)
    summary = train.train(config, num_replicas=2, logdir=str(tmp_path), progress=False)
    assert summary["step"] == 300
    assert summary["held_out_accuracy"] >= 0.97, summary
    evals = loggers.read_jsonl(os.path.join(tmp_path, loggers.JSONL_NAME), role="evaluator")
    assert [r["step"] for r in evals] == [100, 200, 300]
    assert evals[-1]["held_out_accuracy"] == pytest.approx(summary["held_out_accuracy"])


@pytest.mark.slow
def test_one_and_two_replicas_train_alike_with_sync_batch_norm():
    # Same global batch (the stream is replica-count independent), batch
    # statistics over the global batch, mean of per-replica mean gradients:
    # the two runs differ only by float summation order.
    one = _train_learner(1, 100)
    two = _train_learner(2, 100)
    assert abs(one.evaluate()["accuracy"] - two.evaluate()["accuracy"]) <= 0.01
    for w1, w2 in zip(_weights(one), _weights(two)):
        np.testing.assert_allclose(w1, w2, rtol=1e-3, atol=1e-4)
    assert one.step == two.step == 100


@pytest.mark.slow
def test_per_replica_batch_norm_makes_the_replica_count_matter():
    # The contrast that shows the check above can fail: without synchronized
    # batch norm each replica normalizes over half the batch.
    one = _train_learner(1, 20, synchronized_batch_norm=False)
    two = _train_learner(2, 20, synchronized_batch_norm=False)
    largest = max(np.max(np.abs(w1 - w2)) for w1, w2 in zip(_weights(one), _weights(two)))
    assert largest > 1e-3


def test_eager_debug_steps_train_like_compiled_steps():
    """``--debug-eager``: the same step_fn, run as Python, gives the compiled run's weights."""
    compiled = _train_learner(1, 12, steps_per_loop=4)
    eager = _train_learner(1, 12, eager=True, steps_per_loop=4)
    assert compiled.step == eager.step == 12
    # float32: graph and eager kernels round differently (grappler's fused ops; AVX2 and AVX-512 CPUs
    # differ too), and Adam's normalisation turns a last-bit difference in a small gradient into up to
    # ~1.3e-6 in 12 steps (seen on an AVX2 EPYC). A missed, doubled or mis-scaled step moves weights by
    # more than 1e-3 (the check below), so 1e-5 still tells them apart.
    for w1, w2 in zip(_weights(compiled), _weights(eager)):
        np.testing.assert_allclose(w1, w2, rtol=1e-5, atol=1e-5)
    assert max(np.max(np.abs(w1 - w0)) for w1, w0 in zip(_weights(eager), _weights(
        learning.SupervisedLearner(SupervisedConfig(), replication.make_replicator(1))))) > 1e-3


def _small(num_steps):
    return SupervisedConfig(num_steps=num_steps, log_period=10, eval_period=20,
                            checkpoint_period=20, steps_per_loop=10)


def _restore(config, logdir, num_replicas=1):
    learner = learning.SupervisedLearner(config, replication.make_replicator(num_replicas=num_replicas))
    step = checkpointing.Checkpointer(run_dir.checkpoints_dir(logdir),
                                      **learner.checkpointables()).restore_latest()
    return learner, step


@pytest.mark.slow
def test_resume_continues_steps_optimizer_data_and_logs(tmp_path):
    resumed, straight = str(tmp_path / "resumed"), str(tmp_path / "straight")
    train.train(_small(40), num_replicas=2, logdir=resumed, progress=False)
    # A line logged after the last checkpoint by a run that then died must not
    # survive as a duplicate of step 50.
    with open(os.path.join(resumed, loggers.JSONL_NAME), "a") as f:
        f.write('{"step": 50, "wall_time": 0, "role": "learner", "loss": 9}\n')
    summary = train.train(_small(80), num_replicas=2, logdir=resumed, resume=True, progress=False)
    assert summary["step"] == 80

    records = loggers.read_jsonl(os.path.join(resumed, loggers.JSONL_NAME))
    assert [r["step"] for r in records if r["role"] == "learner"] == list(range(10, 81, 10))
    assert [r["step"] for r in records if r["role"] == "evaluator"] == [20, 40, 60, 80]
    assert all(r["loss"] != 9 for r in records if r["role"] == "learner")

    learner, step = _restore(_small(80), resumed)
    assert step == learner.step == 80
    assert int(learner.optimizer.iterations.numpy()) == 80

    # Same data, same optimizer state: 40 + 40 steps == 80 steps in one go.
    train.train(_small(80), num_replicas=2, logdir=straight, progress=False)
    reference, _ = _restore(_small(80), straight)
    for a, b in zip(_weights(learner), _weights(reference)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_resuming_a_finished_run_trains_nothing(tmp_path):
    train.train(_small(20), num_replicas=1, logdir=str(tmp_path), progress=False)
    summary = train.train(_small(20), num_replicas=1, logdir=str(tmp_path), resume=True, progress=False)
    assert summary["step"] == 20
    steps = [r["step"] for r in loggers.read_jsonl(str(tmp_path / loggers.JSONL_NAME), role="learner")]
    assert steps == [10, 20]


def test_ctrl_c_saves_a_checkpoint_at_the_current_step(tmp_path, monkeypatch):
    original, calls = learning.SupervisedLearner.train, []

    def train_then_interrupt(self, iterator, num_steps):
        metrics = original(self, iterator, num_steps)
        calls.append(num_steps)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return metrics

    monkeypatch.setattr(learning.SupervisedLearner, "train", train_then_interrupt)
    config = _small(100).replace(checkpoint_period=100)
    with pytest.raises(KeyboardInterrupt):
        train.train(config, num_replicas=1, logdir=str(tmp_path), progress=False)
    assert run_dir.latest_step(str(tmp_path)) == 30


def test_logdir_guards(tmp_path):
    with pytest.raises(run_dir.RunDirError, match="no intact checkpoint"):
        train.train(_small(10), num_replicas=1, logdir=str(tmp_path), resume=True, progress=False)
    train.train(_small(10), num_replicas=1, logdir=str(tmp_path), progress=False)
    with pytest.raises(run_dir.RunDirError, match="already holds a run with checkpoints"):
        train.train(_small(10), num_replicas=1, logdir=str(tmp_path), progress=False)
