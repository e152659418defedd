"""A local run listens on loopback only, and its Ray instance requires a token.

- The shim itself (``loopback_bind.so``): a Python process started behind it
  runs a real Reverb server and a real TensorFlow gRPC server (the two that
  take only a port) on loopback, and a Reverb client at 127.0.0.1 is served;
  with the switch off the same process listens on the wildcard (the test can
  see the difference).
- A real `rlplat train d4pg` run (no --address) with ``--num-learner-workers
  2`` (TF's gRPC servers and a separate replay server): while actors report,
  every listening socket of every process of the run (the CLI and all its
  descendants) is on 127.0.0.1 or ::1 (``::ffff:127.0.0.1`` is IPv4 loopback
  on a dual-stack socket). The listeners seen are printed (``-rA``).
- The run with one learner and replay inside it is checked the same way, and
  more (the local instance's GCS refuses a call without a token, and its token
  is the run's own; daemon arenas; the learner's allocator), on the live
  D4PG run that test_distributed_signals.py's SIGKILL case starts anyway
  (``loopback_testlib.check_local_run``): one run instead of two.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from loopback_testlib import check_listeners, is_loopback
from rlplat.distributed import loopback
from rlplat.utils import loggers

pytestmark = pytest.mark.multiprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RLPLAT = os.path.join(os.path.dirname(sys.executable), "rlplat")
# Start-up on a busy 2-core machine (TF imports in 5-7 processes) can take minutes.
_STARTUP_BOUND_S = 420
_EXIT_BOUND_S = 120

# A budget the checks never reach: they look at live processes and then stop
# the run with SIGTERM. (With 3000 steps a fast run had already ended its
# actors when the arena check looked for them.)
_RUN = ["train", "d4pg", "--env", "cartpole:swingup", "--policy-layer-sizes", "32,32",
        "--critic-layer-sizes", "32,32", "--global-batch-size", "32", "--min-replay-size", "200",
        "--samples-per-insert", "8", "--num-actors", "2", "--max-actor-steps", "1000000",
        "--checkpoint-period", "3600", "--eval-period", "3600", "--eval-episodes", "1"]




# ------------------------------------------------------------------ the shim
_SERVERS = textwrap.dedent("""
    import json, os, psutil, reverb, tensorflow as tf
    server = reverb.Server([reverb.Table.queue("q", 10)])
    reverb.Client(f"127.0.0.1:{server.port}").server_info(timeout=30)  # served through loopback
    tf_port = __import__("portpicker").pick_unused_port()
    tf_server = tf.distribute.Server({"worker": [f"localhost:{tf_port}"]}, "worker", 0)
    ports = {"reverb": server.port, "tf": tf_port}
    found = {name: sorted({c.laddr.ip for c in psutil.Process().net_connections("inet")
                           if c.status == psutil.CONN_LISTEN and c.laddr.port == port})
             for name, port in ports.items()}
    print(json.dumps(found))
""")


def _servers_behind_shim(switch: str):
    assert loopback.shim_path(), "loopback_bind.so is not built: run scripts/setup.sh"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **loopback.child_environment())
    env[loopback.SWITCH] = switch
    result = subprocess.run([sys.executable, "-c", _SERVERS], env=env, capture_output=True,
                            text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_shim_keeps_reverb_and_tensorflow_servers_on_loopback():
    found = _servers_behind_shim("1")
    print("shim on:", found)
    for name, ips in found.items():
        assert ips and all(is_loopback(ip) for ip in ips), (name, found)


def test_without_the_switch_the_same_servers_listen_on_every_interface():
    found = _servers_behind_shim("0")
    print("shim off:", found)
    assert all(ips and not any(is_loopback(ip) for ip in ips) for ips in found.values()), found


def test_preloaded_children_sets_and_restores_the_environment():
    assert loopback.shim_path(), "loopback_bind.so is not built: run scripts/setup.sh"
    before = dict(os.environ)
    with loopback.preloaded_children():
        assert os.environ["LD_PRELOAD"].split()[0] == loopback.shim_path()
        assert os.environ[loopback.SWITCH] == "1"
        assert os.environ["RAY_LD_PRELOAD_ON_WORKERS"] == "1"  # "0" would strip it from workers
    assert dict(os.environ) == before


def test_a_missing_shim_changes_nothing_and_warns_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv(loopback.PATH_VARIABLE, "/nonexistent/loopback_bind.so")
    monkeypatch.setattr(loopback, "_warned", False)  # once per process: this test's turn
    before = dict(os.environ)
    for _ in range(2):
        with loopback.preloaded_children():
            assert dict(os.environ) == before
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [loopback.missing_warning()], lines
    assert "/nonexistent/loopback_bind.so is missing" in lines[0] and "scripts/setup.sh" in lines[0]


# ------------------------------------------------------------- a real run
class _Run:
    """`rlplat train d4pg` with no --address, in a session of its own."""

    def __init__(self, tmp_path, extra):
        self.logdir = str(tmp_path / "run")
        self.out_path = tmp_path / "cli.out"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("TF_CONFIG", None)
        command = [RLPLAT] if os.path.exists(RLPLAT) else [sys.executable, "-m", "rlplat.launch.cli"]
        with open(self.out_path, "w") as out:
            self.proc = subprocess.Popen([*command, *_RUN, *extra, "--logdir", self.logdir], cwd=REPO,
                                         env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def output(self) -> str:
        return self.out_path.read_text()

    def wait_running(self) -> None:
        """Until actors report: replay, learner(s), actors and evaluator are all up."""
        jsonl = os.path.join(self.logdir, loggers.JSONL_NAME)
        deadline = time.monotonic() + _STARTUP_BOUND_S
        while not (os.path.exists(jsonl) and loggers.read_jsonl(jsonl, "actor")):
            assert self.proc.poll() is None, f"the CLI exited early:\n{self.output()}"
            assert time.monotonic() < deadline, f"no actor results in {_STARTUP_BOUND_S}s:\n{self.output()}"
            time.sleep(0.5)

    def processes(self):
        root = psutil.Process(self.proc.pid)
        return [root, *root.children(recursive=True)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # final checkpoint, clean teardown
            try:
                self.proc.wait(timeout=_EXIT_BOUND_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _check_run(tmp_path, extra, expect_two_listeners):
    run = _Run(tmp_path, extra)
    try:
        run.wait_running()
        return run, check_listeners(run.processes(), expect_two_listeners)
    except BaseException:
        run.stop()
        raise


@pytest.mark.slow
def test_multi_worker_learner_listens_only_on_loopback(tmp_path):
    run, found = _check_run(tmp_path, ["--num-learner-workers", "2"],
                           expect_two_listeners=["ray::ReplayServer"])
    try:
        # Each of the two TF workers: Ray's core-worker port plus its TF gRPC server.
        assert len([row for row in found if "GroupLearnerWorker" in row[0]]) >= 4, found
    finally:
        run.stop()
