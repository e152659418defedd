"""How long a run took to start: seconds from the process's launch to each milestone.

The milestones, in the order a run meets them: Ray is up, the replay server
serves, the learner is built (and restored), the first actor step, the
first learner step. Workers report their own milestones as wall-clock times
(the first actor chunk's start, the first learner step's end), so the figures
hold across processes on one host; across nodes they carry the nodes' clock
offset. Once every milestone is known, the run prints one line and records
them in ``run_info.json`` (``startup_s``).
"""

from __future__ import annotations

import time
from typing import Dict, Optional

MILESTONES = ("ray_up", "replay_ready", "learner_ready", "first_actor_step", "first_learner_step")
_SHOWN = {"ray_up": "Ray up", "replay_ready": "replay ready", "learner_ready": "learner ready",
          "first_actor_step": "first actor step", "first_learner_step": "first learner step"}


def process_launch_time() -> float:
    """When this process started (wall clock, seconds since the epoch); now if that cannot be read."""
    try:
        import psutil  # pylint: disable=g-import-not-at-top  (a Ray dependency)

        return float(psutil.Process().create_time())
    except Exception:  # pylint: disable=broad-except
        return time.time()


def command_start_time() -> float:
    """When this command's code began: its first ``rlplat`` import (wall clock).

    Not the process's creation: a shell runs the last command of ``a && b`` in
    its own process (``exec``), so a run started after ``scripts/setup.sh``
    would count the set-up as start-up. What this leaves out is the
    interpreter's own start, about 0.03 s.
    """
    import rlplat  # pylint: disable=g-import-not-at-top

    return float(rlplat.IMPORTED_AT)


class StartupTimes:
    """The milestones met so far, as seconds after ``launched`` (default: ``command_start_time``)."""

    def __init__(self, launched: Optional[float] = None):
        self.launched = command_start_time() if launched is None else float(launched)
        self.seconds: Dict[str, float] = {}
        self.reported = False

    def mark(self, milestone: str, wall_time: Optional[float] = None) -> None:
        """Records ``milestone`` at ``wall_time`` (now by default); the first mark of each stands."""
        if milestone not in MILESTONES:
            raise ValueError(f"unknown start-up milestone {milestone!r}; one of {MILESTONES}")
        if milestone not in self.seconds:
            when = time.time() if wall_time is None else float(wall_time)
            self.seconds[milestone] = round(max(0.0, when - self.launched), 3)

    def complete(self) -> bool:
        """Whether every milestone is known."""
        return all(m in self.seconds for m in MILESTONES)

    def line(self) -> str:
        """One console line: each milestone's seconds from launch, in order."""
        parts = [f"{_SHOWN[m]} {self.seconds[m]:.1f} s" for m in MILESTONES if m in self.seconds]
        return "start-up from launch: " + ", ".join(parts)
