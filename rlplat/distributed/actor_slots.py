"""The driver's record of each actor and its restart budget (no Ray import).

Restarts are limited per time window, not per lifetime: one actor may be
restarted at most ``max_restarts`` times within any ``window_s`` seconds. A
long run therefore survives an occasional crash of every actor for as long as
it runs, while an actor that crash-loops (fails again right after each
restart) runs out of budget and is given up. See ``driver_actors`` for what
the driver does with a failure.
"""

from __future__ import annotations

import collections
from typing import Any, Deque, Dict, Optional


class RestartBudget:
    """At most ``max_restarts`` restarts within any ``window_s`` seconds.

    Args:
      max_restarts: restarts allowed inside one window (0: none at all).
      window_s: the window's length in seconds.
    """

    def __init__(self, max_restarts: int, window_s: float):
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0 (got {max_restarts})")
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0 (got {window_s})")
        self.max_restarts = int(max_restarts)
        self.window_s = float(window_s)
        self._times: Deque[float] = collections.deque()

    def record(self, now: float) -> bool:
        """Counts a restart at ``now``; False when that exceeds the budget (a crash loop)."""
        self._times.append(now)
        return self.recent(now) <= self.max_restarts

    def recent(self, now: float) -> int:
        """Restarts recorded within the last ``window_s`` seconds before ``now``."""
        while self._times and now - self._times[0] >= self.window_s:
            self._times.popleft()
        return len(self._times)


class ActorSlot:
    """Driver-side bookkeeping of one actor index (its Ray actor is replaced after a failure).

    ``ref`` is the ``run_steps`` call in flight (None between calls);
    ``failed_at`` is set from a failure until the replacement has finished a
    chunk; ``given_up`` marks a crash loop, ``stopped`` the end of the run.
    """

    def __init__(self, index: int, seed: int, handle, budget: RestartBudget):
        self.index, self.seed, self.handle, self.budget = index, seed, handle, budget
        self.ref = None          # the run_steps call in flight
        self.chunk = 0
        self.submitted = 0.0
        self.policy_version = -1
        self.policy_lag: Optional[float] = None  # learner steps behind, when it last reported
        self.steps = 0
        self.restarts = 0                # counted restarts of this index, over the whole run
        self.incarnation = 0             # Ray actors created for this index before the current one
        self.chunks_after_restart = 0    # chunks run by a replacement process
        self.failed_at: Optional[float] = None     # last failure, until a chunk is done again
        self.back_after_s: Optional[float] = None  # last failure -> the replacement's first chunk done
        self.given_up = False
        self.stopped = False

    @property
    def active(self) -> bool:
        """Still part of the run (neither given up nor stopped at the end)."""
        return not (self.given_up or self.stopped)

    def describe(self) -> Dict[str, Any]:
        """The summary's entry for this actor."""
        return {"index": self.index, "seed": self.seed, "steps": self.steps,
                "policy_version": self.policy_version, "failures": self.restarts,
                "restarts": self.restarts, "chunks_after_restart": self.chunks_after_restart,
                "back_after_s": self.back_after_s, "given_up": self.given_up}
