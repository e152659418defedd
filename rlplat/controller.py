"""The outer loop every run shares: stop conditions, periodic evaluation, checkpoints, reports.

A ``Controller`` (the orbit idea) owns *when* things happen; a ``Program``
owns *how*. The local runner, the Ray driver, the supervised and GAN
trainers and the offline runner (the last three through ``StepProgram``) are
programs: each advances its own work (an actor chunk and learner steps in
one process; waiting on Ray results; a chunk of supervised steps) and
starts an evaluation or a checkpoint when asked, synchronously or not.
The controller counts in the program's budgeted steps (actor steps for RL,
learner steps for supervised training) and in seconds, so one loop serves
all three, and a schedule is tested once, here, without any of them.

Periods counted in steps fire at multiples of the period (a resumed run
keeps the same grid); periods in seconds restart when the work they start
begins. A synchronous program cuts its work at the next step boundary
(``advance(max_steps)``), so step-period work happens exactly on the grid.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Dict, Optional, Protocol, Tuple


class Program(Protocol):
    """A run's moving parts, as the controller drives them."""

    def steps(self) -> int:
        """The budgeted count so far (actor steps for RL, learner steps for supervised)."""

    def eval_return(self) -> Optional[float]:
        """The latest evaluation's mean return (None: none finished yet)."""

    def advance(self, max_steps: Optional[int]) -> bool:
        """Does the next slice of work, at most ``max_steps`` budgeted steps when given.

        Returns True once the program has finished stopping (only after ``request_stop``).
        """

    def request_stop(self, reason: str) -> None:
        """Begins stopping; ``advance`` returns True when done."""

    def evaluate(self, video: bool) -> bool:
        """Starts (or runs) an evaluation; False when one is still running."""

    def checkpoint(self) -> bool:
        """Starts (or writes) a checkpoint; False when one is still being written."""

    def report(self) -> None:
        """Logs and shows the current figures."""


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When a run evaluates, checkpoints, reports and stops.

    Attributes:
      max_steps: stop at this many budgeted steps (None: no budget).
      eval_every_steps / eval_every_s: evaluate when either is due (0 / None: never by it).
      checkpoint_every_steps / checkpoint_every_s: checkpoint when either is due.
      report_every_steps / report_every_s: report when either is due.
      target_eval_return: stop once an evaluation's mean return reaches it.
      video_every_evals: K > 0 asks every K-th evaluation (the first included) for a video.
      budget_reason: the stop reason reported when ``max_steps`` is reached.
    """

    max_steps: Optional[int] = None
    eval_every_steps: int = 0
    eval_every_s: Optional[float] = None
    checkpoint_every_steps: int = 0
    checkpoint_every_s: Optional[float] = None
    report_every_steps: int = 0
    report_every_s: Optional[float] = None
    target_eval_return: Optional[float] = None
    video_every_evals: int = 0
    budget_reason: str = "max_actor_steps"

    def __post_init__(self) -> None:
        for name in ("eval_every_steps", "checkpoint_every_steps", "report_every_steps", "video_every_evals"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (got {getattr(self, name)})")
        for name in ("eval_every_s", "checkpoint_every_s", "report_every_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 (got {value})")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 (got {self.max_steps})")


class Periodic:
    """Due every ``every_steps`` budgeted steps (on their multiples) or every ``every_s`` seconds."""

    def __init__(self, every_steps: int, every_s: Optional[float], steps: int, now: float):
        self.every_steps, self.every_s = every_steps, every_s
        self.next_steps = self.next_time = math.inf
        self.restart(steps, now)

    def restart(self, steps: int, now: float) -> None:
        """The next time it is due, counted from ``steps`` and ``now``."""
        if self.every_steps:
            self.next_steps = (steps // self.every_steps + 1) * self.every_steps
        if self.every_s:
            self.next_time = now + self.every_s

    def due(self, steps: int, now: float) -> bool:
        return steps >= self.next_steps or now >= self.next_time


class Controller:
    """Runs a ``Program`` to its end under a ``Schedule``.

    Args:
      schedule: when to evaluate, checkpoint, report and stop.
      clock: seconds, monotonic (injectable for tests).
    """

    def __init__(self, schedule: Schedule, clock: Callable[[], float] = time.monotonic):
        self.schedule = schedule
        self._clock = clock
        self.evals_started = 0
        self.stop_reason: Optional[str] = None

    def stop_reason_now(self, program: Program, stop_requested: Optional[Callable[[], bool]]) -> Optional[str]:
        """Why the run should stop now, or None: the budget, the target return, or a request."""
        schedule = self.schedule
        if schedule.max_steps is not None and program.steps() >= schedule.max_steps:
            return schedule.budget_reason
        latest = program.eval_return()
        if schedule.target_eval_return is not None and latest is not None and latest >= schedule.target_eval_return:
            return "target_eval_return"
        if stop_requested is not None and stop_requested():
            return "stop_event"
        return None

    def run(self, program: Program, stop_requested: Optional[Callable[[], bool]] = None) -> Optional[str]:
        """Advances ``program`` until it has stopped; returns why it stopped.

        Evaluations and checkpoints are not started once stopping began: the
        program's own ending (a final checkpoint and evaluation) follows.
        """
        s = self.schedule
        steps, now = program.steps(), self._clock()
        evaluation = Periodic(s.eval_every_steps, s.eval_every_s, steps, now)
        saving = Periodic(s.checkpoint_every_steps, s.checkpoint_every_s, steps, now)
        reporting = Periodic(s.report_every_steps, s.report_every_s, steps, now)
        stopping = False
        while True:
            if not stopping:
                self.stop_reason = self.stop_reason_now(program, stop_requested)
                if self.stop_reason:
                    stopping = True
                    program.request_stop(self.stop_reason)
            limit = None if stopping else self._steps_to_boundary(steps, (evaluation, saving, reporting))
            if program.advance(limit):
                break
            steps, now = program.steps(), self._clock()
            if reporting.due(steps, now):
                reporting.restart(steps, now)
                program.report()
            if stopping:
                continue
            if evaluation.due(steps, now):
                video = s.video_every_evals > 0 and self.evals_started % s.video_every_evals == 0
                if program.evaluate(video):
                    self.evals_started += 1
                    evaluation.restart(steps, now)
            if saving.due(steps, now) and program.checkpoint():
                saving.restart(steps, now)
        program.report()
        return self.stop_reason

    def _steps_to_boundary(self, steps: int, periodics) -> Optional[int]:
        """Budgeted steps to the next step-counted event or the budget; None when there is none."""
        targets = [p.next_steps for p in periodics if p.every_steps]
        if self.schedule.max_steps is not None:
            targets.append(self.schedule.max_steps)
        left = [t - steps for t in targets if t > steps]
        return int(min(left)) if left else None


class StepProgram:
    """A synchronous ``Program`` budgeted in learner steps, made of callables (in-process training).

    What the supervised and GAN workloads share: train a chunk (cut by the
    controller at the next log, evaluation or checkpoint step), log its
    metrics, evaluate, checkpoint; at the end the last step is always
    evaluated and checkpointed (``finish``).

    Args:
      steps: the learner's step count now.
      train: runs ``n`` steps; returns their metrics.
      evaluate: evaluates (and logs) at the current step; returns its figures.
      checkpoint: saves at the current step.
      report: logs ``(step, metrics, steps in the chunk, its seconds)`` of the last chunk.
      steps_per_loop: the longest chunk.
      saved_step: the step of the checkpoint already on disk (resume), if any.
    """

    def __init__(self, *, steps: Callable[[], int], train: Callable[[int], Dict[str, float]],
                 evaluate: Callable[[], Dict[str, float]], checkpoint: Callable[[], None],
                 report: Callable[[int, Dict[str, float], int, float], None], steps_per_loop: int,
                 saved_step: Optional[int] = None):
        self._steps, self._train, self._evaluate = steps, train, evaluate
        self._checkpoint, self._report = checkpoint, report
        self.steps_per_loop = steps_per_loop
        self.saved_step = saved_step
        self.last_eval: Optional[Dict[str, float]] = None
        self.last_eval_step: Optional[int] = None
        self._reported_step: Optional[int] = None
        self._chunk: Optional[Tuple[Dict[str, float], int, float]] = None  # metrics, steps, seconds
        self._stopping = False

    def steps(self) -> int:
        return self._steps()

    def eval_return(self) -> Optional[float]:
        return None  # no target return: these runs stop at their step budget

    def advance(self, max_steps: Optional[int]) -> bool:
        if self._stopping:
            return True
        n = min(self.steps_per_loop, max_steps or self.steps_per_loop)
        started = time.perf_counter()
        metrics = self._train(n)
        self._chunk = (metrics, n, time.perf_counter() - started)
        return False

    def request_stop(self, reason: str) -> None:
        del reason
        self._stopping = True

    def evaluate(self, video: bool) -> bool:
        del video
        self.last_eval, self.last_eval_step = self._evaluate(), self._steps()
        return True

    def checkpoint(self) -> bool:
        self._checkpoint()
        self.saved_step = self._steps()
        return True

    def report(self) -> None:
        step = self._steps()
        if self._chunk is not None and self._reported_step != step:
            self._report(step, *self._chunk)
            self._reported_step = step

    def finish(self) -> None:
        """The last step is always evaluated and checkpointed."""
        if self.last_eval_step != self._steps():
            self.evaluate(video=False)
        if self.saved_step != self._steps():
            self.checkpoint()

    def run(self, num_steps: int, eval_every_steps: int = 0, checkpoint_every_steps: int = 0,
            report_every_steps: int = 0) -> None:
        """Runs to ``num_steps`` under the shared ``Controller``, then ``finish``."""
        Controller(Schedule(max_steps=num_steps, eval_every_steps=eval_every_steps,
                            checkpoint_every_steps=checkpoint_every_steps, report_every_steps=report_every_steps,
                            budget_reason="max_steps")).run(self)
        self.finish()
