"""Learner-side watchdogs: calls that can time out, and a replay liveness probe.

A learner step blocks inside TensorFlow on the replay dataset; Reverb's
sampler retries a dead server forever, so the step itself never fails. The
learners run each call on a helper thread and, whenever it has not returned
within the step timeout, probe the replay server: alive means keep waiting
(e.g. the first call is still tracing), gone means fail with the fix.
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import Any

from rlplat.replay import errors as replay_errors
from rlplat import replay_shards as shards


def check_replay_server(address: str, timeout_s: float) -> None:
    """Raises ReplayTimeoutError (one line, with the fix) if ``address`` (or one of its shards) is gone."""
    for shard in shards.split_addresses(address):
        if replay_errors.probe_server(shard, min(timeout_s, 10.0)) is None:
            raise replay_errors.ReplayTimeoutError(
                f"learner step did not return within {timeout_s:g}s and the replay server at "
                f"{shard} does not answer; it has died or is unreachable (restart the run; "
                f"check the replay process/node)")


class CallRunner:
    """Runs calls on one daemon helper thread so the caller can time out.

    A persistent thread (not a ThreadPoolExecutor, whose threads are joined at
    interpreter exit and would hang it) costs ~20 us per call. The thread
    holds nothing of its owner between calls and ends when the runner is
    garbage: a parked thread that kept the last call (a learner's bound step,
    hence its replay iterator) would keep every learner a long-lived process
    (pytest, a notebook) ever built alive for good.
    """

    def __init__(self):
        self._calls: "queue.Queue" = queue.Queue()
        self._thread = None  # Started on the first call: in-memory learners never need it.
        self._hung = False

    @staticmethod
    def _loop(calls: "queue.Queue") -> None:
        while True:
            item = calls.get()
            if item is None:  # the runner was garbage-collected
                return
            fn, done, box = item
            del item
            try:
                box.append((True, fn()))
            except BaseException as e:  # pylint: disable=broad-except
                box.append((False, e))
            done.set()
            del fn, done, box  # the caller owns the result; this frame must not keep it

    def run(self, fn, timeout_s: float, on_timeout) -> Any:
        """``fn()``; every ``timeout_s`` without a result calls ``on_timeout()``.

        ``on_timeout`` raises to give up (e.g. the server is gone) or returns
        to keep waiting (e.g. the first call is still compiling).
        """
        if self._hung:
            raise RuntimeError("an earlier learner call never returned; this learner is unusable")
        if self._thread is None:
            self._thread = threading.Thread(target=CallRunner._loop, args=(self._calls,),
                                            name="learner-step", daemon=True)
            self._thread.start()
            weakref.finalize(self, self._calls.put, None)
        done, box = threading.Event(), []
        self._calls.put((fn, done, box))
        while not done.wait(timeout_s):
            try:
                on_timeout()
            except BaseException:
                self._hung = True
                raise
        ok, value = box[0]
        if ok:
            return value
        raise value


def run_replay_fed(runner: "CallRunner", call, replay, step_timeout_s: float,
                   rate_limiter_timeout_ms: int) -> Any:
    """Runs a learner call that samples from replay, so that it cannot hang.

    Args:
      runner: the learner's ``CallRunner``.
      call: the zero-argument call (e.g. K steps in one ``tf.function``).
      replay: ``(address, table)`` of the replay it samples, or None for an
        in-memory dataset (then ``call`` simply runs here).
      step_timeout_s: how often to probe the server while the call runs.
      rate_limiter_timeout_ms: the dataset's sampling timeout (for the error).

    Raises:
      ReplayTimeoutError: the dataset timed out, or the server is gone.
    """
    if replay is None:
        return call()
    from rlplat.replay import datasets  # pylint: disable=g-import-not-at-top  (TensorFlow)

    address, table = replay
    with datasets.translate_sampling_errors(address, table or "?", rate_limiter_timeout_ms):
        return runner.run(call, step_timeout_s,
                          lambda: check_replay_server(address, step_timeout_s))
