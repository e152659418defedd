"""The driver's live console line and the rates it shows (no Ray import).

One line, rewritten in place (carriage return) on a terminal, or printed once
per period when stdout is a file or pipe (logs stay readable):

    actor 52,000/1,000,000 | learner 1,310 | eval 312.4 @v1,200 | env 402/s | learn 11.8/s |
    replay 52,000 | spi 31.9 | policy v1,296 lag 14

The numbers come from the driver's own counters (actor chunks and learner
chunks it received) and from the replay server's table info.
"""

from __future__ import annotations

import collections
import math
import sys
import time
from typing import Deque, Optional, TextIO, Tuple


class RateMeter:
    """Rate of a growing counter over a sliding time window."""

    def __init__(self, window_s: float = 30.0):
        self._window_s = window_s
        self._points: Deque[Tuple[float, float]] = collections.deque()

    def update(self, value: float, now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        self._points.append((now, float(value)))
        while len(self._points) > 2 and now - self._points[1][0] >= self._window_s:
            self._points.popleft()

    def rate(self) -> float:
        """Units per second over the window (NaN until two points exist)."""
        if len(self._points) < 2:
            return math.nan
        (t0, v0), (t1, v1) = self._points[0], self._points[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else math.nan


def _num(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{digits}f}"


def format_status(*, actor_steps: int, max_actor_steps: Optional[float], learner_steps: int,
                  env_steps_per_s: float, learner_steps_per_s: float,
                  eval_return: Optional[float], eval_version: Optional[int],
                  replay_size: Optional[int], samples_per_insert: Optional[float],
                  policy_version: Optional[int], policy_lag: Optional[float],
                  restarts: int = 0) -> str:
    """The console line (no trailing newline)."""
    parts = [
        f"actor {_num(actor_steps)}" + (
            f"/{_num(max_actor_steps)}" if max_actor_steps and math.isfinite(max_actor_steps) else ""),
        f"learner {_num(learner_steps)}",
        f"eval {_num(eval_return, 1)}" + (f" @v{_num(eval_version)}" if eval_version is not None else ""),
        f"env {_num(env_steps_per_s)}/s",
        f"learn {_num(learner_steps_per_s, 1)}/s",
        f"replay {_num(replay_size)}",
        f"spi {_num(samples_per_insert, 1)}",
        f"policy v{_num(policy_version)}"
        f" lag {_num(policy_lag)}",
    ]
    if restarts:
        parts.append(f"restarts {restarts}")
    if (max_actor_steps and math.isfinite(max_actor_steps) and env_steps_per_s
            and env_steps_per_s > 0 and math.isfinite(env_steps_per_s)):
        parts.append(f"eta {format_duration(max(0.0, max_actor_steps - actor_steps) / env_steps_per_s)}")
    return " | ".join(parts)


def format_duration(seconds: float) -> str:
    """``75`` -> ``1m15s``, ``3725`` -> ``1h02m``: short enough for the console line."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class ConsoleLine:
    """Shows a status line: in place on a terminal, one line per call otherwise."""

    def __init__(self, enabled: bool = True, stream: TextIO = sys.stdout):
        self._enabled = enabled
        self._stream = stream
        self._tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self._width = 0

    def show(self, text: str) -> None:
        if not self._enabled:
            return
        if self._tty:
            padded = text.ljust(self._width)  # wipe what a longer line left behind
            self._width = len(text)
            self._stream.write("\r" + padded)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def message(self, text: str) -> None:
        """A line of its own (startup, warnings), keeping the status line intact."""
        if not self._enabled:
            return
        if self._tty and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self._stream.write(text + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._enabled and self._tty and self._width:
            self._stream.write("\n")
            self._stream.flush()
            self._width = 0
