"""The learner's call runner: results come back, and nothing of a call outlives it."""

import gc
import threading
import weakref

import pytest

from rlplat.utils import watchdog


class _Step:
    """Stands in for a learner's bound step: the object a parked thread must not keep."""

    def __call__(self):
        return 7


def _runner_threads():
    return [t for t in threading.enumerate() if t.name == "learner-step"]


def test_returns_the_result_and_re_raises_the_calls_error():
    runner = watchdog.CallRunner()
    assert runner.run(lambda: 41 + 1, 5.0, lambda: None) == 42
    with pytest.raises(KeyError, match="boom"):
        runner.run(lambda: {}["boom"], 5.0, lambda: None)


def test_timeout_callback_runs_while_waiting_and_its_error_marks_the_runner_hung():
    runner = watchdog.CallRunner()
    release, calls = threading.Event(), []

    def give_up():
        calls.append(1)
        raise TimeoutError("gone")

    with pytest.raises(TimeoutError):
        runner.run(lambda: release.wait(10), 0.05, give_up)
    release.set()
    assert calls == [1]
    with pytest.raises(RuntimeError, match="never returned"):
        runner.run(lambda: 1, 5.0, lambda: None)


def test_the_thread_keeps_no_call_and_ends_with_its_runner():
    before = set(_runner_threads())
    runner = watchdog.CallRunner()
    step = _Step()
    assert runner.run(step, 5.0, lambda: None) == 7
    (thread,) = set(_runner_threads()) - before
    step_ref = weakref.ref(step)
    del step
    # Plain reference counting must free the call: a parked thread holding it
    # would keep a learner (and its replay iterator) until some later collection.
    assert step_ref() is None
    del runner
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()
