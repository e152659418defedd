"""A disk that fills up during a run: the run stops with one line and keeps its last good checkpoint.

The run directory lives on a small tmpfs this test mounts (root only; CI runs
as root), so the disk really fills: during a checkpoint or replay save, or
during a log write, whichever comes first.
"""

import os
import subprocess
import sys
import time

import pytest

from rlplat import run_dir

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

RLPLAT = os.path.join(os.path.dirname(sys.executable), "rlplat")
RUN = ["train", "d4pg", "--env", "cartpole:balance", "--num-actors", "1", "--replay-checkpoint",
       "--checkpoint-period", "1", "--eval-every-steps", "1000", "--eval-episodes", "1",
       "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32", "--global-batch-size", "32",
       "--min-replay-size", "64", "--samples-per-insert", "4", "--max-actor-steps", "200000"]


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], check=True)
    try:
        yield str(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_stops_the_run_with_one_line_and_keeps_the_last_good_checkpoint(small_disk):
    logdir = os.path.join(small_disk, "run")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([RLPLAT, *RUN, "--logdir", logdir], capture_output=True, text=True, env=env,
                            timeout=900)
    errors = [line for line in result.stderr.splitlines() if line.startswith("rlplat: error:")]
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(errors) == 1, result.stderr[-3000:]
    assert "free disk space, then --resume" in errors[0], errors[0]
    # Stopped well before its budget, with a checkpoint a resume can use.
    steps = run_dir.checkpoint_steps(logdir)
    assert steps and not run_dir.damaged_steps(logdir), (steps, run_dir.damaged_steps(logdir))
    assert run_dir.start_step(logdir, resume=True) == steps[-1]


def test_a_disk_filled_between_checkpoints_stops_the_run_at_a_log_write(small_disk):
    """Another program fills the disk after the first checkpoint; the next write is a log line."""
    logdir = os.path.join(small_disk, "run")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    flags = [f for f in RUN if f != "--replay-checkpoint"]
    # The first save comes after 20 s; the next is 20 s off, while log lines are written every few seconds.
    flags[flags.index("--checkpoint-period") + 1] = "20"
    proc = subprocess.Popen([RLPLAT, *flags, "--logdir", logdir], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while not run_dir.checkpoint_steps(logdir):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        first = run_dir.checkpoint_steps(logdir)
        try:
            with open(os.path.join(small_disk, "filler"), "wb") as filler:  # everything that is left
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
        except OSError:  # full, possibly already at the open
            pass
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    errors = [line for line in stderr.splitlines() if line.startswith("rlplat: error:")]
    assert proc.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr and len(errors) == 1, stderr[-3000:]
    assert "free disk space, then --resume" in errors[0], errors[0]
    steps = run_dir.checkpoint_steps(logdir)
    assert steps[:len(first)] == first and not run_dir.damaged_steps(logdir), (first, steps)
    assert run_dir.start_step(logdir, resume=True) == steps[-1]
