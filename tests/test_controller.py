"""The shared outer loop: when a run evaluates, checkpoints, reports and stops (pure logic)."""

import pytest

from rlplat.controller import Controller, Schedule


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Program:
    """A synchronous stand-in: each turn takes ``turn_steps`` steps (cut at the boundary) and ``turn_s``."""

    def __init__(self, clock, turn_steps=100, turn_s=1.0, returns=None, busy_evals=0):
        self.clock, self.turn_steps, self.turn_s = clock, turn_steps, turn_s
        self.count = 0
        self.log = []
        self.returns = list(returns or [])
        self.latest = None
        self.stopping = False
        self.busy_evals = busy_evals  # the first evaluate() calls find one still running

    def steps(self):
        return self.count

    def eval_return(self):
        return self.latest

    def advance(self, max_steps):
        if self.stopping:
            return True
        self.count += self.turn_steps if max_steps is None else min(self.turn_steps, max_steps)
        self.clock.now += self.turn_s
        return False

    def request_stop(self, reason):
        self.log.append(("stop", self.count, reason))
        self.stopping = True

    def evaluate(self, video):
        if self.busy_evals:
            self.busy_evals -= 1
            return False
        self.log.append(("eval", self.count, video))
        if self.returns:
            self.latest = self.returns.pop(0)
        return True

    def checkpoint(self):
        self.log.append(("checkpoint", self.count))
        return True

    def report(self):
        self.log.append(("report", self.count))


def _events(program, kind):
    return [e[1:] for e in program.log if e[0] == kind]


def test_step_periods_fire_on_their_grid_and_cut_the_turns():
    clock = Clock()
    program = Program(clock, turn_steps=300)
    reason = Controller(Schedule(max_steps=1000, eval_every_steps=250, checkpoint_every_steps=400,
                                 report_every_steps=500), clock).run(program)
    assert reason == "max_actor_steps"
    # Turns of 300 are cut at 250, 400, 500, 750, 800, 1000: every event lands exactly on its grid.
    assert [s for s, _ in _events(program, "eval")] == [250, 500, 750, 1000]
    assert _events(program, "checkpoint") == [(400,), (800,)]
    assert _events(program, "report") == [(500,), (1000,), (1000,)]  # the last one: the loop's end
    assert _events(program, "stop") == [(1000, "max_actor_steps")]


def test_a_resumed_run_keeps_the_grid():
    clock = Clock()
    program = Program(clock, turn_steps=100)
    program.count = 1030
    Controller(Schedule(max_steps=1500, eval_every_steps=200), clock).run(program)
    assert [s for s, _ in _events(program, "eval")] == [1200, 1400]


def test_second_periods_and_busy_evaluations():
    clock = Clock()
    program = Program(clock, turn_steps=10, turn_s=1.0, busy_evals=2)
    Controller(Schedule(max_steps=100, eval_every_s=3.0, checkpoint_every_s=4.0), clock).run(program)
    # Due at t=3 but busy twice: it starts at t=5, and the period restarts from there.
    assert [s for s, _ in _events(program, "eval")] == [50, 80]
    assert _events(program, "checkpoint") == [(40,), (80,)]


def test_target_return_stops_and_nothing_starts_after_stopping():
    clock = Clock()
    program = Program(clock, turn_steps=100, returns=[10.0, 50.0, 90.0])
    reason = Controller(Schedule(max_steps=10_000, eval_every_steps=100, checkpoint_every_steps=100,
                                 target_eval_return=80.0), clock).run(program)
    assert reason == "target_eval_return"
    assert [s for s, _ in _events(program, "eval")] == [100, 200, 300]
    assert _events(program, "stop") == [(300, "target_eval_return")]
    assert _events(program, "checkpoint")[-1] == (300,)


def test_stop_request_and_video_every_k_evaluations():
    clock = Clock()
    program = Program(clock, turn_steps=100)
    requested = lambda: program.count >= 700  # noqa: E731
    controller = Controller(Schedule(eval_every_steps=100, video_every_evals=3), clock)
    assert controller.run(program, requested) == "stop_event"
    assert _events(program, "eval") == [(100, True), (200, False), (300, False), (400, True),
                                        (500, False), (600, False), (700, True)]
    assert controller.evals_started == 7


def test_schedule_refuses_bad_periods():
    with pytest.raises(ValueError, match="eval_every_steps must be >= 0"):
        Schedule(eval_every_steps=-1)
    with pytest.raises(ValueError, match="checkpoint_every_s must be > 0"):
        Schedule(checkpoint_every_s=0)
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        Schedule(max_steps=0)


def test_step_program_cuts_chunks_and_ends_with_an_evaluation_and_a_checkpoint():
    from rlplat.controller import StepProgram

    state = {"step": 0}
    log = []

    def train(n):
        state["step"] += n
        log.append(("train", n))
        return {"loss": 1.0}

    program = StepProgram(steps=lambda: state["step"], train=train,
                          evaluate=lambda: log.append(("eval", state["step"])) or {"accuracy": 0.5},
                          checkpoint=lambda: log.append(("checkpoint", state["step"])),
                          report=lambda step, metrics, n, seconds: log.append(("report", step, n)),
                          steps_per_loop=4)
    Controller(Schedule(max_steps=10, eval_every_steps=3, checkpoint_every_steps=5, report_every_steps=5,
                        budget_reason="max_steps")).run(program)
    program.finish()
    assert [e[1] for e in log if e[0] == "train"] == [3, 2, 1, 3, 1]  # cut at 3, 5, 6, 9, 10
    assert [e[1] for e in log if e[0] == "eval"] == [3, 6, 9, 10]  # the last step by finish()
    assert [e[1] for e in log if e[0] == "checkpoint"] == [5, 10]  # 10 on the grid: not saved twice
    assert [e[1:] for e in log if e[0] == "report"] == [(5, 2), (10, 1)]  # once per step
    assert program.last_eval == {"accuracy": 0.5} and program.saved_step == 10
