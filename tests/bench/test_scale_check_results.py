"""The committed scale-check result: its verdicts follow from its own curves, and a starved learner is caught.

`bench/scale_check.py` keeps every run's eval curve. Recomputing both
comparisons from those curves must give the recorded verdicts; and the
learner starved of updates (a broken samples-per-insert) must read as
"different" from the healthy runs it is compared with: real learning curves,
where the check has to see a real difference.
"""

import json
import os

import numpy as np
import pytest

from rlplat import scale_check

RESULT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "results", "scale_check.json")


@pytest.fixture(scope="module")
def result():
    with open(RESULT) as f:
        return json.load(f)


def _curves(runs):
    return [np.asarray(run, dtype=np.float64) for run in runs]


def test_the_recorded_verdicts_follow_from_the_recorded_curves(result):
    margin = result["settings"]["margin"]
    scale = scale_check.compare(_curves(result["curves"]["a"]), _curves(result["curves"]["b"]), margin=margin)
    assert scale.verdict == result["scale"]["verdict"]
    assert scale.difference == pytest.approx(result["scale"]["difference"])
    starved = scale_check.compare(_curves(result["curves"]["a"]), _curves(result["curves"]["starved"]),
                                  margin=margin)
    assert starved.verdict == result["starved"]["verdict"]


def test_a_starved_learner_is_caught_on_real_curves(result):
    starved = scale_check.compare(_curves(result["curves"]["a"]), _curves(result["curves"]["starved"]),
                                  margin=result["settings"]["margin"])
    assert starved.verdict == scale_check.DIFFERENT, starved.describe()
    assert starved.high < 0  # it learns less, not more


def test_the_runs_are_real_and_complete(result):
    settings = result["settings"]
    assert result["env"] == "cartpole:swingup" and settings["seeds"] >= 3
    for group in ("a", "b", "starved"):
        runs = result["curves"][group]
        assert len(runs) == settings["seeds"]
        assert all(run[-1][0] >= settings["max_actor_steps"] * 0.95 for run in runs)
    assert result["machine"]["cpu_model"]
