"""Ends every process of a local Ray instance when the process that started it dies.

Ray fate-shares its head processes with the driver (the kernel's parent-death
signal), and the workers follow their raylet at once. Its agents do not: a
``ray::DashboardAgent`` or ``ray::RuntimeEnvAgent`` whose raylet was killed
first tries to report the death to the (also dead) GCS and was measured still
alive more than 30 s after a ``kill -9`` of ``rlplat train``.

So a local instance gets a reaper: a tiny process, in a session of its own so
that a signal to the driver's process group spares it, that blocks reading a
pipe only the driver holds. When the driver is gone, however it went, the
kernel closes the pipe and the reaper SIGKILLs every process in the sessions
of the processes Ray spawned (each starts one, see ``cluster._own_session``;
the raylet's session holds the agents and the workers), sweeps until two passes in a row
find none (processes may still be spawning; at most 2 s), and exits. After a normal
``ray.shutdown`` the same sweep finds nothing, or a straggler.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterable, Optional

# Runs under a bare interpreter (-S -E: no site, no environment): nothing to
# import but os, time and signal, so it starts in milliseconds and needs no venv.
_PROGRAM = r"""
import os, signal, sys, time
sessions = {int(s) for s in sys.argv[1:]}
me = os.getpid()
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
deadline = time.monotonic() + 2.0
quiet = 0
while quiet < 2 and time.monotonic() < deadline:
    found = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.getsid(int(name)) in sessions:
                os.kill(int(name), signal.SIGKILL)
                found += 1
        except OSError:
            pass
    quiet = 0 if found else quiet + 1
    time.sleep(0.1)
"""


class Reaper:
    """A running reaper for the sessions ``session_ids``; ``release`` lets it sweep now."""

    def __init__(self, session_ids: Iterable[int]):
        sessions = sorted({int(s) for s in session_ids})
        read_end, self._write_end = os.pipe()  # not inheritable: only we hold the write end
        try:
            self._proc: Optional[subprocess.Popen] = subprocess.Popen(
                [sys.executable, "-S", "-E", "-c", _PROGRAM, *map(str, sessions)],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        finally:
            os.close(read_end)
        self.session_ids = tuple(sessions)

    def release(self, timeout_s: float = 5.0) -> None:
        """Closes the pipe (as our death would) and waits up to ``timeout_s`` for the sweep."""
        if self._write_end is not None:
            os.close(self._write_end)
            self._write_end = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass  # it will finish on its own; never block a shutdown on it
            self._proc = None


def supported() -> bool:
    """Whether sessions can be swept here (Linux's /proc)."""
    return sys.platform.startswith("linux") and os.path.isdir("/proc")
