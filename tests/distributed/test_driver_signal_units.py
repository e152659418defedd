"""The driver's signal handling in pieces: what the handler records, when the driver stops.

The whole path, through the real CLI and every Ray process, is in
``test_distributed_signals.py``; here are its parts, fast, plus (one Ray
instance) the cause of the lost checkpoints: a KeyboardInterrupt raised by a
signal handler inside ``ray.wait`` came out as a bare KeyboardInterrupt.
"""

import io
import os
import signal
import subprocess
import sys
import time

import pytest

from rlplat.distributed import cluster
from rlplat.distributed import progress
from rlplat.distributed.driver import Driver
from rlplat.distributed.errors import RunInterrupted
from rlplat.experiment import Experiment
from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.launch import cli
from rlplat.launch import rl_run


def _driver():
    driver = Driver(Experiment(None, "cartpole:swingup", num_actors=1, logdir="unused"),
                    RayLayoutConfig(num_learner_replicas=1), restored_step=None)
    driver.out = io.StringIO()
    driver.console = driver.loop.console = progress.ConsoleLine(True, stream=driver.out)
    return driver


def _said(driver) -> str:
    """What the driver printed since the last call."""
    text = driver.out.getvalue()
    driver.out.seek(0)
    driver.out.truncate()
    return text


def test_the_handler_only_records_and_the_driver_raises_at_its_next_check():
    driver = _driver()
    driver.calls.check_signal()  # nothing yet
    try:
        driver.calls.on_signal(signal.SIGTERM, None)
    except KeyboardInterrupt as e:  # caught: a KeyboardInterrupt would stop pytest itself
        pytest.fail(f"the handler raised {e!r}: inside ray.wait Ray turns that into a bare "
                    "KeyboardInterrupt")
    with pytest.raises(RunInterrupted) as info:
        driver.calls.check_signal()
    assert info.value.signum == signal.SIGTERM and info.value.exit_code == 143
    driver.calls.handled = True  # stopping on it: the first signal no longer interrupts
    driver.calls.check_signal()
    driver.calls.on_signal(signal.SIGINT, None)  # a second one does
    with pytest.raises(RunInterrupted) as info:
        driver.calls.check_signal()
    assert info.value.exit_code == 143  # the run's exit code is the first signal's


def test_final_checkpoint_only_when_the_loop_ran_and_no_second_signal():
    calls = []

    def finish(timeout_s, final_eval, save_by=None):
        calls.append((timeout_s, final_eval, save_by - time.monotonic()))

    driver = _driver()
    driver._finish = finish
    driver.calls.on_signal(signal.SIGINT, None)
    driver._stop_on_signal()
    assert calls == [] and "SIGINT during start-up" in _said(driver)

    driver.loop.loop_started = time.monotonic()
    driver._stop_on_signal()
    assert len(calls) == 1 and calls[0][1] is False
    stop_s, _, save_by_s = calls[0]
    assert stop_s <= save_by_s <= 22  # leaves teardown time within a 30 s SIGKILL grace
    assert "SIGINT: stopping; saving a checkpoint" in _said(driver)

    driver.calls.on_signal(signal.SIGINT, None)
    driver._stop_on_signal()
    assert len(calls) == 1
    assert "second signal: stopping now, without a final checkpoint" in _said(driver)


def test_a_second_signal_during_the_stop_gives_up_the_checkpoint():
    driver = _driver()
    driver.loop.loop_started = time.monotonic()

    def finish(*args, **kwargs):
        driver.calls.on_signal(signal.SIGINT, None)
        driver.calls.check_signal()

    driver._finish = finish
    driver.calls.on_signal(signal.SIGINT, None)
    try:
        driver._stop_on_signal()
    except KeyboardInterrupt as e:  # caught: a KeyboardInterrupt would stop pytest itself
        pytest.fail(f"the second signal escaped the stop as {e!r}")
    assert "second signal: stopping now, without a final checkpoint" in _said(driver)


def test_a_signal_during_the_replay_probe_wins_over_the_learner_death_verdict():
    """A learner frozen (e.g. suspended) stops answering the replay probe; the
    user's signal, sent meanwhile, must lead to the stop path, not to 'learner
    failed' (the CI failure of the second-signal CLI test)."""
    driver = _driver()
    driver.loop.loop_started = time.monotonic()
    driver.workers.replay_address, driver.workers.colocate = "127.0.0.1:1", True
    probes = []

    def read_replay(timeout_s=2.0):
        probes.append(timeout_s)
        if len(probes) == 1:
            driver.calls.on_signal(signal.SIGINT, None)  # arrives while the first probe waits
        return False

    driver.loop._read_replay = read_replay
    driver.loop._replay_host_dead = lambda: True
    with pytest.raises(RunInterrupted) as info:
        driver.loop._check_replay_alive()
    assert info.value.exit_code == 130 and len(probes) == 1
    driver.calls.handled = True  # during the stop, a dead replay is a verdict again
    with pytest.raises(Exception, match="no longer answers"):
        driver.loop._check_replay_alive()


def test_a_replay_server_that_is_slow_to_answer_but_alive_is_not_declared_dead():
    """Probes missed on an overloaded machine (the host process alive, as Ray
    says) are counted, and the run goes on; the stall timeouts catch a hang."""
    driver = _driver()
    driver.loop.loop_started = time.monotonic()
    driver.workers.replay_address, driver.workers.colocate = "127.0.0.1:1", True
    probes = []
    driver.loop._read_replay = lambda timeout_s=2.0: probes.append(timeout_s) and False
    driver.loop._replay_host_dead = lambda: False
    driver.loop._check_replay_alive()
    assert probes == [5.0, 5.0] and driver.loop.replay_probe_misses == 1


def test_keep_signal_handlers_holds_back_sigint_and_sigterm_only():
    def mine(signum, frame):
        del signum, frame

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        signal.signal(signal.SIGTERM, mine)
        signal.signal(signal.SIGINT, mine)
        with cluster.keep_signal_handlers():
            assert signal.signal(signal.SIGTERM, signal.SIG_DFL) is mine  # what Ray gets back
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGUSR1, mine)
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGUSR1) is mine
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # and signal.signal works again after it
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def test_ray_processes_start_in_a_session_of_their_own():
    from ray._private import services  # pylint: disable=g-import-not-at-top

    original = services.ConsolePopen
    with cluster._own_session():
        child = services.ConsolePopen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert services.ConsolePopen is original
        assert os.getsid(child.pid) == child.pid != os.getsid(0)
    finally:
        child.kill()
        child.wait(timeout=30)


def test_sigterm_outside_the_driver_exits_143(monkeypatch, capsys):
    """Before the driver owns the signals (TF import, checks) and after it, SIGTERM unwinds."""
    def command(args):
        del args
        saved = rl_run._unwind_on_sigterm()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
            return 0
        finally:
            signal.signal(signal.SIGTERM, saved)

    monkeypatch.setattr(cli, "build_parser", lambda: _Parser(command))
    assert cli.main([]) == 143
    assert capsys.readouterr().err.strip() == "rlplat: interrupted"


class _Parser:
    def __init__(self, command):
        self._command = command

    def parse_args(self, argv):
        del argv
        return type("Args", (), {"run": staticmethod(self._command)})()


@pytest.mark.multiprocess  # starts a Ray instance
def test_a_signal_inside_ray_wait_stops_the_driver_with_its_own_exit_code():
    """The cause of the lost checkpoints, in a process of its own (signals, a Ray instance)."""
    script = """
import os, signal, sys, threading, time
import ray
from rlplat.distributed import cluster
from rlplat.distributed import progress
from rlplat.distributed.driver import Driver
from rlplat.distributed.errors import RunInterrupted
from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.experiment import Experiment

cluster.connect(num_cpus=1)
driver = Driver(Experiment(None, "cartpole:swingup", num_actors=1, logdir="unused"),
                RayLayoutConfig(num_learner_replicas=1, console=False), None)
driver.calls.install_signal_handlers()

@ray.remote
def slow():
    time.sleep(60)

ref = slow.remote()
ray.wait([ref], timeout=5)  # the task is running
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    driver.calls.get(ref, 30, "slow")
    print("no exception")
except RunInterrupted as e:
    print("RunInterrupted", e.exit_code)
except KeyboardInterrupt as e:
    print("bare", type(e).__name__)
finally:
    ray.shutdown()
"""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.stdout.strip().splitlines()[-1:] == ["RunInterrupted 143"], done.stdout + done.stderr
