"""bench/startup.py's before/after report: medians per tree and the per-round gaps of the first learner step."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import startup  # noqa: E402


def _run(tree, rnd, first_learner_step):
    steps = {m: first_learner_step * (k + 1) / len(startup.MILESTONES) for k, m in enumerate(startup.MILESTONES)}
    return {"tree": tree, "round": rnd, "startup_s": steps, "git_sha": "abc1234" if tree == "baseline" else "new"}


def test_the_baseline_gets_its_medians_and_the_gap_of_each_round():
    runs = [_run("this", 0, 10.0), _run("baseline", 0, 13.0), _run("baseline", 1, 11.0), _run("this", 1, 12.0),
            _run("this", 2, 9.0), _run("baseline", 2, 15.0)]
    base = startup.baseline_report(runs)
    assert base["git_sha"] == "abc1234"
    assert base["first_learner_step_gaps_s"] == pytest.approx([3.0, -1.0, 6.0])
    assert base["rounds_this_faster"] == 2
    assert base["milestones_s"]["first_learner_step"] == pytest.approx(13.0)  # median of 13, 11, 15
    assert startup.baseline_report([_run("this", 0, 10.0)]) is None
