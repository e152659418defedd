"""Replay checkpoints (``--replay-checkpoint``) with a real Reverb server, in one process."""

from __future__ import annotations

import os
import shutil

import numpy as np
import reverb
import tensorflow as tf

from rlplat.replay import checkpoints
from rlplat.replay import server as replay_server
from rlplat.replay import tables

SPI, MIN_SIZE, BUFFER = 2.0, 10, 40.0


def _tables(samples_per_insert=SPI, min_size=MIN_SIZE):
    return [reverb.Table("t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 1000,
                         reverb.rate_limiters.SampleToInsertRatio(samples_per_insert, min_size, BUFFER),
                         signature=(tf.TensorSpec([3], tf.float32),))]


def _insert(client, n, start=0):
    with client.trajectory_writer(1) as writer:
        for i in range(start, start + n):
            writer.append((np.full(3, i, np.float32),))
            writer.create_item("t", 1.0, (writer.history[0][-1],))
        writer.flush()


def _info(port):
    return reverb.Client(f"127.0.0.1:{port}").server_info()["t"]


def test_a_server_restores_items_and_rate_limiter_from_the_checkpoint_of_its_step(tmp_path):
    logdir = str(tmp_path)
    server = replay_server.make_server(_tables(), checkpointer=checkpoints.make_checkpointer(logdir))
    client = reverb.Client(f"127.0.0.1:{server.port}")
    _insert(client, 25)
    list(client.sample("t", num_samples=8))
    first = checkpoints.save(f"127.0.0.1:{server.port}", logdir, 100, keep_steps=[100])
    _insert(client, 5, start=25)
    second = checkpoints.save(f"127.0.0.1:{server.port}", logdir, 200, keep_steps=[100, 200])
    server.stop()
    assert first["replay_items"] == 25 and second["replay_items"] == 30
    assert checkpoints.saved_steps(logdir) == [100, 200]
    assert checkpoints.saved_items(second["replay_path"]) == 30
    # Learner step 150 was never saved with replay: the newest before it stands in.
    assert checkpoints.find(logdir, 150) == first["replay_path"]
    assert checkpoints.find(logdir, 99) is None

    # A leftover in Reverb's scratch root (a crash before it was moved) is newer
    # than ckpt-100 and would be loaded instead: starting a server clears it.
    scratch = os.path.join(checkpoints.directory(logdir), ".reverb")
    shutil.copytree(second["replay_path"], os.path.join(scratch, "9999-leftover"))
    # New, different settings: the checkpoint's own win (hence the CLI's refusal).
    restored = replay_server.make_server(
        _tables(samples_per_insert=8.0, min_size=1000),
        checkpointer=checkpoints.make_checkpointer(logdir, checkpoints.find(logdir, 100)))
    try:
        info = _info(restored.port)
        assert info.current_size == 25
        limiter = info.rate_limiter_info
        assert (limiter.samples_per_insert, limiter.min_size_to_sample) == (SPI, MIN_SIZE)
        assert (limiter.insert_stats.completed, limiter.sample_stats.completed) == (25, 8)
        # No warm-up again: the restored table samples before anything new is inserted.
        sample = next(iter(reverb.Client(f"127.0.0.1:{restored.port}").sample("t", num_samples=1)))
        assert 0 <= float(np.ravel(sample[0].data[0])[0]) < 25
    finally:
        restored.stop()


def test_saving_prunes_what_the_learner_pruned_and_never_rewrites_a_saved_step(tmp_path):
    logdir = str(tmp_path)
    server = replay_server.make_server(_tables(), checkpointer=checkpoints.make_checkpointer(logdir))
    try:
        address = f"127.0.0.1:{server.port}"
        _insert(reverb.Client(address), 12)
        for step in (1, 2, 3):
            checkpoints.save(address, logdir, step, keep_steps=[s for s in (1, 2, 3) if s <= step][-2:])
        assert checkpoints.saved_steps(logdir) == [2, 3]
        _insert(reverb.Client(address), 4, start=12)
        # Step 3 is saved and complete: saving it again must not put it at risk
        # (a crash mid-rewrite would leave no replay for the newest learner step).
        again = checkpoints.save(address, logdir, 3, keep_steps=[2, 3])
        assert checkpoints.saved_steps(logdir) == [2, 3] and checkpoints.saved_items(again["replay_path"]) == 12
    finally:
        server.stop()


def test_a_queue_table_like_impalas_comes_back_with_its_items_in_order(tmp_path):
    logdir = str(tmp_path)
    queue = lambda: [tables.make_queue_table("t", 8, (tf.TensorSpec([3], tf.float32),))]  # noqa: E731
    server = replay_server.make_server(queue(), checkpointer=checkpoints.make_checkpointer(logdir))
    _insert(reverb.Client(f"127.0.0.1:{server.port}"), 5)
    saved = checkpoints.save(f"127.0.0.1:{server.port}", logdir, 7, keep_steps=[7])
    server.stop()
    restored = replay_server.make_server(
        queue(), checkpointer=checkpoints.make_checkpointer(logdir, saved["replay_path"]))
    try:
        assert _info(restored.port).current_size == 5
        client = reverb.Client(f"127.0.0.1:{restored.port}")
        firsts = [float(np.ravel(s[0].data[0])[0]) for s in client.sample("t", num_samples=2)]
        assert firsts == [0.0, 1.0]
    finally:
        restored.stop()
