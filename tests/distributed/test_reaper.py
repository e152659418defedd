"""The reaper: when its owner dies, every process in the given sessions dies, and nothing else."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from rlplat.distributed import reaper

pytestmark = pytest.mark.skipif(not reaper.supported(), reason="needs Linux /proc")

_SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
# A session leader that also starts a child in its session (like the raylet and its agents).
_LEADER = [sys.executable, "-c",
           "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
           "'import time; time.sleep(120)']); print('up', flush=True); time.sleep(120)"]


def _gone(pids, within_s=10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.1)
    return False


def _leader():
    proc = subprocess.Popen(_LEADER, start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    child = psutil.Process(proc.pid).children()[0].pid
    return proc, child


def test_release_kills_the_sessions_and_their_children_only():
    leader, child = _leader()
    bystander = subprocess.Popen(_SLEEPER, start_new_session=True)
    try:
        keeper = reaper.Reaper([leader.pid])
        time.sleep(0.5)
        assert psutil.pid_exists(child)  # nothing happens while we hold the pipe
        keeper.release()
        leader.wait(timeout=10)
        assert _gone([child])
        assert bystander.poll() is None
    finally:
        for proc in (leader, bystander):
            proc.kill()
            proc.wait(timeout=10)


def test_the_owners_death_by_sigkill_sweeps():
    """The owner holds the pipe and is SIGKILLed; the reaper, in its own session, cleans up."""
    owner = subprocess.Popen([sys.executable, "-c", f"""
import subprocess, sys, time
from rlplat.distributed import reaper
leader = subprocess.Popen({_LEADER!r}, start_new_session=True, stdout=subprocess.PIPE, text=True)
leader.stdout.readline()
keeper = reaper.Reaper([leader.pid])
print(leader.pid, flush=True)
time.sleep(120)
"""], stdout=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))))
    leader_pid = int(owner.stdout.readline())
    victims = [leader_pid] + [c.pid for c in psutil.Process(leader_pid).children()]
    try:
        assert len(victims) == 2
        time.sleep(0.5)
        assert all(psutil.pid_exists(p) for p in victims)
        owner.kill()
        owner.wait(timeout=10)
        assert _gone(victims), [p for p in victims if psutil.pid_exists(p)]
    finally:
        for pid in victims:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
