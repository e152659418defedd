"""The driver's Ray waits, interruptible by SIGINT/SIGTERM, and the signals' state.

Every wait of the driver (``wait``, ``get``) runs in slices of ``POLL_S`` and
checks between them whether a signal asks to stop, so a signal is acted on
within half a second wherever the driver is waiting.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Dict, List, Optional

import ray

from rlplat.distributed import errors
from rlplat.distributed.errors import RunFailedError, RunInterrupted

# Longest slice of any wait of the driver's: a signal is acted on within it.
POLL_S = 0.5


class RayCalls:
    """Signal-aware ``ray.wait``/``ray.get`` with timeouts, and the signals that interrupt them.

    Args:
      call_timeout_s: bound on fetching a result that is already ready.
    """

    def __init__(self, call_timeout_s: float):
        self.call_timeout_s = call_timeout_s
        self.signum: Optional[int] = None  # the first SIGINT/SIGTERM (see on_signal)
        self.hurry = False  # a second signal: stop waiting for anything
        self.handled = False  # stopping on signum already: only a second signal interrupts
        self._saved_handlers: Dict[int, Any] = {}

    # -------------------------------------------------------------- signals
    def install_signal_handlers(self) -> None:
        """Routes SIGINT/SIGTERM to ``on_signal``; called again after ``ray.init``.

        ``ray.init`` is kept from replacing them (``cluster.keep_signal_handlers``),
        but Ray's C++ core hooks SIGTERM below Python (a stack dump on stderr,
        then Python's handler); installing ours again puts Python's in front.
        """
        if threading.current_thread() is not threading.main_thread():
            return  # Only the main thread may own signals (e.g. a test runs us in a thread).
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._saved_handlers.setdefault(signum, signal.getsignal(signum))
            signal.signal(signum, self.on_signal)

    def restore_signal_handlers(self) -> None:
        for signum, handler in self._saved_handlers.items():
            signal.signal(signum, handler)
        self._saved_handlers.clear()

    def on_signal(self, signum, frame) -> None:
        """Records the signal: the first asks for a graceful stop, the second for a quick one.

        It never raises. Ray runs Python's signal handlers from inside
        ``ray.wait``/``ray.get`` (where the driver spends its time) and turns
        any KeyboardInterrupt raised there, RunInterrupted included, into a
        bare KeyboardInterrupt: the signal and the final checkpoint were lost.
        Raising anywhere else could cut a log line or counters.json in half.
        So the main thread acts on it at its next ``check_signal``, which
        every wait reaches within ``POLL_S``.
        """
        del frame
        if self.signum is None:
            self.signum = signum
        else:
            self.hurry = True

    def check_signal(self) -> None:
        """Raises RunInterrupted if a signal asks to stop (and is not being acted on already)."""
        if self.hurry or (self.signum is not None and not self.handled):
            raise RunInterrupted(self.signum)

    # ----------------------------------------------------------------- waits
    def wait(self, refs: List[Any], num_returns: int, timeout_s: float):
        """``ray.wait`` in slices of ``POLL_S``, acting on a signal between them."""
        deadline = time.monotonic() + timeout_s
        ready: List[Any] = []
        rest = list(refs)
        if num_returns < 1 or not rest:
            return ready, rest
        while True:
            got, rest = ray.wait(rest, num_returns=min(num_returns - len(ready), len(rest)),
                                 timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
            ready += got
            if len(ready) >= num_returns or not rest or time.monotonic() >= deadline:
                return ready, rest
            self.check_signal()

    def get(self, ref, timeout_s: float, what: str):
        """``ray.get`` with a timeout; any failure becomes a one-line RunFailedError.

        Waits in slices (``wait``), so a signal interrupts a long wait such as
        the learner's start-up.
        """
        ready, _ = self.wait([ref], 1, timeout_s)
        if not ready:
            raise RunFailedError(f"{what} did not answer within {timeout_s:g}s")
        try:
            # Ready, and ray.wait made it local: this returns at once.
            return ray.get(ref, timeout=self.call_timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise RunFailedError(f"{what} did not answer within {timeout_s:g}s") from e
        except ray.exceptions.RayError as e:
            raise RunFailedError(f"{what} failed: {errors.one_line(e)}") from e
