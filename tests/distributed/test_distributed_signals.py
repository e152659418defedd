"""SIGTERM to a running driver: checkpoint, exit 143, and no process left behind."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from rlplat.utils import loggers

pytestmark = pytest.mark.multiprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRIVER = textwrap.dedent("""
    import sys
    from agents.d4pg.builder import D4PGBuilder
    from agents.d4pg.config import D4PGConfig
    from rlplat.distributed import layout

    config = D4PGConfig(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), num_atoms=11,
                        global_batch_size=32, min_replay_size=200, samples_per_insert=8.0,
                        variable_update_period=100)
    try:
        layout.run_on_ray(D4PGBuilder(config=config), "cartpole:swingup",
                          num_actors=2, max_actor_steps=10_000_000, logdir=sys.argv[1], seed=0,
                          layout=layout.RayLayoutConfig(actor_chunk_steps=500, learner_chunk_steps=16,
                                                        console_every_s=1.0))
    except layout.RunInterrupted as e:
        sys.exit(e.exit_code)
""")


def _alive(processes):
    """The processes of ``processes`` (psutil objects) still running, zombies excluded."""
    left = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.NoSuchProcess:
            pass
    return left


def test_sigterm_checkpoints_and_leaves_no_orphans(tmp_path):
    logdir = str(tmp_path / "run")
    out = open(tmp_path / "driver.out", "w+")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, logdir], cwd=REPO, env=env,
                              stdout=out, stderr=subprocess.STDOUT)
    descendants = []
    try:
        # Wait until actors report chunks: every kind of worker is then running.
        deadline = time.monotonic() + 240
        jsonl = os.path.join(logdir, loggers.JSONL_NAME)
        while not loggers.read_jsonl(jsonl, "actor"):
            assert driver.poll() is None, open(tmp_path / "driver.out").read()
            assert time.monotonic() < deadline, "the run never got going"
            time.sleep(0.5)
        descendants = psutil.Process(driver.pid).children(recursive=True)
        titles = " ".join(" ".join(_cmdline(p)) for p in descendants)
        for part in ("raylet", "gcs_server", "ray::ActorWorker", "ray::LearnerWorker"):
            assert part in titles, part

        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=90)
        out.seek(0)
        output = out.read()
        assert code == 128 + signal.SIGTERM, output
        assert "SIGTERM: stopping" in output
        assert "Traceback" not in output, output
        # The learner reached a step boundary in time, so a checkpoint was kept.
        assert any(name.endswith(".index") for name in os.listdir(os.path.join(logdir, "checkpoints")))

        deadline = time.monotonic() + 20
        while _alive(descendants) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = _alive(descendants)
        assert not left, [" ".join(_cmdline(p)) for p in left]
    finally:
        for proc in [psutil.Process(driver.pid)] if driver.poll() is None else []:
            proc.kill()
        for proc in _alive(descendants):
            proc.kill()
        out.close()


def _cmdline(proc):
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
