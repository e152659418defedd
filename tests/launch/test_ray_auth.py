"""`rlplat train --address` requires a Ray cluster with token authentication.

Two real Ray heads on loopback (`ray start --head --block`, each with its own
--temp-dir so nothing else finds them): one started with RAY_AUTH_MODE=disabled,
one with RAY_AUTH_MODE=token and a token of its own.

- The probe (one GCS call without a token) tells them apart.
- `rlplat train d4pg --address` to the open head: exit 2, ONE line naming the
  fix, and no run directory left behind.
- With --allow-unauthenticated-ray the same command connects (its "Ray
  cluster at" line) and is then stopped with SIGTERM.
- On the token head, a short run's status is read with `rlplat status
  --address` (a separate process that never sees the logdir's path) while
  it is live and after it ended, and matches what `--logdir` reads.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from cli_testlib import REPO, RLPLAT, assert_usage_error, run_rlplat_as_user
from rlplat.distributed import ray_auth

pytestmark = pytest.mark.multiprocess

# Not 127.0.0.1: a joining driver swaps that for the machine's network IP.
HOST = "127.0.0.2"
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
_HEAD_START_S = 120
_CONNECT_BOUND_S = 300
_RUN = ["train", "d4pg", "--num-actors", "1", "--policy-layer-sizes", "32,32",
        "--critic-layer-sizes", "32,32", "--global-batch-size", "32", "--min-replay-size", "32",
        "--samples-per-insert", "1", "--eval-episodes", "1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class _Head:
    """A one-node Ray cluster in a session of its own; ``stop`` ends the whole session."""

    def __init__(self, auth_mode: str, num_cpus: int = 1):
        self.root = tempfile.mkdtemp(prefix="rlauth-", dir="/tmp")  # short: Ray's socket paths
        self.port = _free_port()
        env = dict(os.environ, RAY_AUTH_MODE=auth_mode)
        for name in ("RAY_AUTH_TOKEN", "RAY_ADDRESS", "LD_PRELOAD", "RLPLAT_LOOPBACK_ONLY"):
            env.pop(name, None)
        if auth_mode == "token":
            env["RAY_AUTH_TOKEN_PATH"] = os.path.join(self.root, "token")
            with open(env["RAY_AUTH_TOKEN_PATH"], "w") as f:
                f.write(os.urandom(32).hex())
        self.log = open(os.path.join(self.root, "head.log"), "w")
        self.proc = subprocess.Popen(
            [RAY, "start", "--head", "--block", "--node-ip-address", HOST, "--port", str(self.port),
             "--num-cpus", str(num_cpus), "--include-dashboard", "false", "--disable-usage-stats",
             "--temp-dir", os.path.join(self.root, "ray")],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + _HEAD_START_S
        while True:
            assert self.proc.poll() is None, open(self.log.name).read()
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, open(self.log.name).read()
                time.sleep(0.3)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def stop(self) -> None:
        # A disposable head: SIGKILL its whole session at once (workers have
        # process groups of their own; a SIGTERM'd `ray start --block` took
        # 30 s to wind down gracefully, twice per module).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            members = [p for p in psutil.process_iter() if _session_of(p) == self.proc.pid]
            if not members:
                break
            for member in members:
                try:
                    member.kill()
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.2)
        self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _session_of(proc) -> int:
    """The session of ``proc``, or -1 when it is gone or a zombie (nothing left to kill)."""
    try:
        return -1 if proc.status() == psutil.STATUS_ZOMBIE else os.getsid(proc.pid)
    except (OSError, psutil.Error):
        return -1


@pytest.fixture(scope="module")
def open_head():
    head = _Head("disabled")
    yield head
    head.stop()


@pytest.fixture(scope="module")
def token_head():
    head = _Head("token", num_cpus=2)  # room for a learner and an actor (the status test)
    yield head
    head.stop()


def test_probe_tells_a_token_cluster_from_an_open_one(open_head, token_head):
    assert ray_auth.requires_token(HOST, open_head.port) is False
    assert ray_auth.requires_token(HOST, token_head.port) is True


def test_address_of_a_cluster_without_token_auth_is_refused(open_head, tmp_path):
    logdir = tmp_path / "run"
    result, seconds = run_rlplat_as_user(*_RUN, "--address", open_head.address, "--logdir", str(logdir),
                                         cwd=str(tmp_path), timeout=120)
    print(f"refused in {seconds:.1f}s: {result.stderr.strip()}")
    assert_usage_error(result, f"Ray at {open_head.address} does not require token authentication",
                       "RAY_AUTH_MODE=token", "--allow-unauthenticated-ray")
    assert not logdir.exists()  # the empty run directory was removed again


def test_opt_out_flag_joins_the_open_cluster(open_head, tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    out_path = tmp_path / "cli.out"
    command = [RLPLAT] if os.path.exists(RLPLAT) else [sys.executable, "-m", "rlplat.launch.cli"]
    with open(out_path, "w") as out:
        proc = subprocess.Popen([*command, *_RUN, "--address", open_head.address,
                                 "--allow-unauthenticated-ray", "--logdir", str(tmp_path / "run")],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + _CONNECT_BOUND_S
        while f"Ray cluster at {open_head.address}" not in out_path.read_text():
            assert proc.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, out_path.read_text()
            time.sleep(0.3)
        assert "does not require token authentication" not in out_path.read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # past the check: stop the run early
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _status_on(head, *extra, env):
    command = [RLPLAT] if os.path.exists(RLPLAT) else [sys.executable, "-m", "rlplat.launch.cli"]
    result = subprocess.run([*command, "status", "--address", head.address, "--json", *extra],
                            cwd="/", env=env, capture_output=True, text=True, timeout=120)
    return result, [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_status_address_shows_a_run_live_and_after_it_ended(token_head, tmp_path):
    """Seen live, then stopped by SIGINT once seen (so no machine is too fast for it), then ended."""
    from rlplat.utils import run_status  # pylint: disable=g-import-not-at-top

    env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=os.path.join(token_head.root, "token"))
    for name in ("TF_CONFIG", "RAY_ADDRESS", "RAY_AUTH_TOKEN"):
        env.pop(name, None)
    logdir = str(tmp_path / "run")
    command = [RLPLAT] if os.path.exists(RLPLAT) else [sys.executable, "-m", "rlplat.launch.cli"]
    out_path = tmp_path / "train.out"
    with open(out_path, "w") as out:  # no --max-actor-steps: it runs until the SIGINT below
        proc = subprocess.Popen([*command, *_RUN, "--address", token_head.address, "--logdir", logdir],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        live = None
        deadline = time.monotonic() + _CONNECT_BOUND_S
        while live is None:
            assert proc.poll() is None, out_path.read_text()
            assert time.monotonic() < deadline, out_path.read_text()
            _, statuses = _status_on(token_head, env=env)
            live = next((s for s in statuses if s["logdir"] == logdir and s["run"]["state"] == "live"
                         and (s["actor_steps"] or 0) > 0), None)
            time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130, out_path.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result, statuses = _status_on(token_head, "--logdir", logdir, env=env)
    assert result.returncode == 0, result.stderr
    [ended] = statuses
    local = run_status.read_status(logdir)
    assert ended["run"]["state"] == "ended"
    assert ended["actor_steps"] == local["actor_steps"] >= live["actor_steps"] > 0
    assert ended["learner_steps"] == local["learner_steps"]
    assert ended["checkpoint"]["learner_step"] == local["checkpoint"]["learner_step"]
    # A run the cluster never saw: one line naming the fix.
    result, _ = _status_on(token_head, "--logdir", str(tmp_path / "other"), env=env)
    assert_usage_error(result, "no rlplat run on the Ray cluster", "--logdir")


_PUT_ENTRIES = """
import json, sys
import ray
from ray.experimental import internal_kv
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
for key, value in json.loads(sys.argv[2]).items():
    internal_kv._internal_kv_put(key, value, overwrite=True, namespace="rlplat_status")
ray.shutdown()
"""


def test_status_address_skips_each_malformed_entry_with_one_line(token_head, tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=os.path.join(token_head.root, "token"))
    for name in ("TF_CONFIG", "RAY_ADDRESS", "RAY_AUTH_TOKEN"):
        env.pop(name, None)
    bad = {"/runs/torn": '{"logdir": "/runs/torn", "run": {"sta',  # cut short
           "/runs/list": "[1, 2, 3]",  # JSON, not a snapshot
           "/runs/no-run": json.dumps({"logdir": "/runs/no-run", "published": 1.0}),
           "/runs/when": json.dumps({"logdir": "/runs/when", "published": "yesterday", "run": {}})}
    subprocess.run([sys.executable, "-c", _PUT_ENTRIES, token_head.address, json.dumps(bad)], env=env,
                   check=True, timeout=120, capture_output=True)
    result, statuses = _status_on(token_head, env=env)
    warnings = [line for line in result.stderr.splitlines() if "skipped the malformed status entry" in line]
    assert sorted(w.split("'")[1] for w in warnings) == sorted(bad), result.stderr
    assert "Traceback" not in result.stderr
    # Whatever else the cluster holds (an earlier test's run) is still shown, or the
    # usual one-line answer when nothing is left.
    assert result.returncode == 0 or (result.returncode == 2 and result.stderr.splitlines()[-1].startswith(
        "rlplat: error: no rlplat run on the Ray cluster")), result.stderr
    assert all(s["logdir"] not in bad for s in statuses)
