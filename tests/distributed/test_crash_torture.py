"""The crash-torture bench's CI slice: 5 SIGKILLs of a real D4PG run, each resumed; nothing is lost.

``bench/crash_torture.py`` runs 50 at random; this runs 5 in a fixed order
that kills every victim (the driver, the learner, the whole tree), the
learner twice while a checkpoint or replay save is on disk, and
checks what the bench checks: every resume starts, the counters never go
back, no checkpoint the state file names is damaged, and the run reaches
its budget.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import crash_torture  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_five_kills_lose_nothing(tmp_path):
    targets = ["driver", "learner", "tree", "learner", "driver"]
    assert set(targets) == set(crash_torture.TARGETS)
    record = crash_torture.torture(kills=5, max_actor_steps=30000, seed=3, workdir=str(tmp_path),
                                   targets=targets, start_timeout_s=300.0)
    assert record["passed"], record["problems"]
    lives = record["lives"]
    assert [life["target"] for life in lives] == targets + [None]
    # Every kill happened (no life ran to the budget ahead of plan) and each life trained.
    assert all("killed" in life for life in lives[:-1]) and record["kills_done"] == 5
    assert all(life["started"] or life["exit_code"] == 0 for life in lives), lives
    assert lives[-1]["exit_code"] == 0 and lives[-1]["committed"]["actor_steps"] >= 30000
    assert all(life.get("left_over", 0) == 0 for life in lives)
