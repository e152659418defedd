"""The driver's errors, and one-line summaries of remote failures.

Ray reports a failed remote call as a traceback paragraph; the CLI promises
one line naming the problem. ``one_line`` picks that line.
"""

from __future__ import annotations

import signal

import ray


class RunFailedError(RuntimeError):
    """The run cannot go on (learner failed, replay died, no actor left); one line."""


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the run (after cleaning up).

    ``exit_code`` is the conventional 128 + signal number (130, 143). It is a
    KeyboardInterrupt so a CLI that already handles Ctrl-C handles it too.
    """

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


def one_line(error: BaseException) -> str:
    """The most useful single line of an exception (Ray wraps remote tracebacks)."""
    if isinstance(error, RunFailedError) and isinstance(error.__cause__, ray.exceptions.RayError):
        error = error.__cause__
    if isinstance(error, ray.exceptions.RayActorError):
        if error.actor_init_failed:  # __init__ raised: its last traceback line says why
            return "start-up failed: " + last_error_line(str(error))
        # Ray's text here is a paragraph about OOM killers; the gist is enough.
        return ("its process died (killed, crashed or out of memory; see its log in the Ray "
                "session's logs/ directory)")
    cause = getattr(error, "cause", None)  # a RayTaskError's original exception
    if isinstance(cause, BaseException) and not isinstance(cause, ray.exceptions.RayError):
        line = last_error_line(str(cause))
        return f"{type(cause).__name__}: {line}" if line else type(cause).__name__
    return last_error_line(str(error)) or type(error).__name__


def last_error_line(text: str) -> str:
    """The last ``Type: message`` line of a traceback text (else its last line), capped."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # A remote traceback ends with "ExcType: message"; that is the line to show.
    for line in reversed(lines):
        if ": " in line and not line.startswith(("File ", "Traceback")):
            return line[:300]
    return (lines[-1] if lines else "")[:300]
