"""The run directory's owner: the state file, crash-safe checkpoints, counters, and the one-writer lock."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from rlplat import run_dir
from rlplat.distributed import counters
from rlplat.utils import checkpointing


def _checkpointer(logdir, value=0.0, **kwargs):
    variable = tf.Variable(np.full([64], value, np.float32))
    return checkpointing.Checkpointer(run_dir.checkpoints_dir(logdir), v=variable, **kwargs), variable


def test_the_state_file_is_the_truth_and_orphans_are_not_checkpoints(tmp_path):
    logdir = str(tmp_path)
    ckpt, variable = _checkpointer(logdir)
    for step in (10, 20):
        variable.assign(np.full([64], float(step), np.float32))
        ckpt.save(step)
    assert run_dir.checkpoint_steps(logdir) == [10, 20] and run_dir.latest_step(logdir) == 20
    # A writer killed after writing ckpt-30's files but before naming it: an orphan.
    for ext in ("index", "data-00000-of-00001"):
        with open(run_dir.checkpoint_prefix(logdir, 20) + "." + ext, "rb") as src:
            data = src.read()
        with open(run_dir.checkpoint_prefix(logdir, 30) + "." + ext, "wb") as dst:
            dst.write(data)
    assert run_dir.latest_step(logdir) == 20
    assert run_dir.read_state(run_dir.checkpoints_dir(logdir))[-1].endswith("ckpt-20")
    # TensorFlow's own reader agrees with the state file we write.
    assert tf.train.latest_checkpoint(run_dir.checkpoints_dir(logdir)).endswith("ckpt-20")


def test_a_save_never_rewrites_a_named_checkpoint(tmp_path):
    logdir = str(tmp_path)
    ckpt, variable = _checkpointer(logdir, 1.0)
    path = ckpt.save(5)
    index = path + ".index"
    before = (os.stat(index).st_ino, os.stat(index).st_mtime_ns)
    variable.assign(np.full([64], 2.0, np.float32))  # (a step-less change would be a bug upstream)
    time.sleep(0.01)
    assert ckpt.save(5) == path
    assert (os.stat(index).st_ino, os.stat(index).st_mtime_ns) == before
    restorer, restored = _checkpointer(logdir)
    assert restorer.restore(5) == 5 and restored.numpy()[0] == 1.0


def test_restore_falls_back_past_a_torn_checkpoint_with_one_warning(tmp_path, caplog):
    logdir = str(tmp_path)
    ckpt, variable = _checkpointer(logdir, max_to_keep=3)
    for step in (1, 2, 3):
        variable.assign(np.full([64], float(step), np.float32))
        ckpt.save(step)
    data = run_dir.checkpoint_prefix(logdir, 3) + ".data-00000-of-00001"
    with open(data, "r+b") as f:  # torn: half its bytes
        f.truncate(os.path.getsize(data) // 2)
    assert run_dir.damaged_steps(logdir) == [3]
    assert run_dir.latest_step(logdir) == 2 and run_dir.latest_step(logdir, verify=False) == 3
    assert run_dir.start_step(logdir, resume=True) == 2
    restorer, restored = _checkpointer(logdir)
    with caplog.at_level("WARNING"):
        assert restorer.restore_latest() == 2
    assert restored.numpy()[0] == 2.0
    assert [r.message for r in caplog.records if "skipped" in r.message] == [
        "restored ckpt-2; skipped newer unreadable checkpoint(s): ckpt-3 (fails its manifest)"]
    for step in (1, 2):  # every one damaged: a resume refuses, it does not start over
        os.unlink(run_dir.checkpoint_prefix(logdir, step) + ".index")
    with pytest.raises(run_dir.RunDirError, match="no intact checkpoint"):
        run_dir.start_step(logdir, resume=True)


def test_a_failed_save_leaves_the_named_checkpoints_and_no_orphan(tmp_path, monkeypatch):
    logdir = str(tmp_path)
    ckpt, _ = _checkpointer(logdir)
    ckpt.save(1)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_dir, "write_manifest", disk_full)
    with pytest.raises(OSError, match="No space"):
        ckpt.save(2)
    assert run_dir.checkpoint_steps(logdir) == [1]
    assert not [n for n in os.listdir(run_dir.checkpoints_dir(logdir)) if n.startswith("ckpt-2")]


def test_durable_json_leaves_no_temp_file_and_damaged_json_is_one_line(tmp_path):
    path = str(tmp_path / "x.json")
    run_dir.write_json(path, {"a": 1})
    assert json.load(open(path)) == {"a": 1} and os.listdir(tmp_path) == ["x.json"]
    for text in ("", '{"a": ', "[1, 2]"):
        with open(path, "w") as f:
            f.write(text)
        with pytest.raises(run_dir.RunDirError) as info:
            run_dir.read_json_object(path, "run record")
        assert "\n" not in str(info.value) and "run record" in str(info.value)


@pytest.mark.parametrize("text", ["", "{", "[]", '{"10": {"actor_steps": "many"}}', '{"x": {}}'])
def test_a_damaged_counters_file_stops_the_resume(tmp_path, text):
    logdir = str(tmp_path)
    os.makedirs(run_dir.checkpoints_dir(logdir))
    with open(run_dir.counters_path(logdir), "w") as f:
        f.write(text)
    with pytest.raises(run_dir.RunDirError, match="counters file"):
        counters.load_counters(logdir, 10)


def test_counters_round_trip_and_fall_back_to_an_older_entry(tmp_path):
    logdir = str(tmp_path)
    counters.save_counters(logdir, 10, {"actor_steps": 100})
    counters.save_counters(logdir, 20, {"actor_steps": 200})
    assert counters.load_counters(logdir, 20) == {"actor_steps": 200}
    assert counters.load_counters(logdir, 15) == {"actor_steps": 100}
    assert counters.load_counters(logdir, 5) == {}


_HOLD = """
import sys, time
from rlplat import run_dir
run_dir.RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_one_writer_a_second_is_refused_naming_the_holder_and_a_kill_frees_it(tmp_path):
    logdir = str(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, logdir], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert run_dir.is_locked(logdir)
        with pytest.raises(run_dir.RunDirLocked, match=f"in use by process {holder.pid}") as info:
            run_dir.RunLock(logdir).acquire()
        assert info.value.pid == holder.pid
        with pytest.raises(run_dir.RunDirLocked):
            run_dir.check_not_locked(logdir)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    assert not run_dir.is_locked(logdir)  # the kernel dropped it with the process
    with run_dir.RunLock(logdir) as lock:
        assert lock.held and run_dir.lock_holder_pid(logdir) == os.getpid()
        with pytest.raises(run_dir.RunDirLocked):  # a second writer in the same process, too
            run_dir.RunLock(logdir).acquire()
    assert not run_dir.is_locked(logdir)
