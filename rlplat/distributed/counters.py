"""The driver's counters, saved next to each checkpoint so a resume continues them.

``checkpoints/counters.json`` maps a learner step (a checkpoint) to the
counters at the time it was saved: actor steps, episodes, actor restarts. A
checkpoint whose entry was never written (the driver died between the two
writes) falls back to the newest entry before it, so actor steps can only be
under-counted, never invented.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

COUNTERS_FILE = "counters.json"
CHECKPOINT_SUBDIR = "checkpoints"


def save_counters(logdir: str, learner_step: int, values: Dict[str, Any], keep: int = 20) -> None:
    """Records the driver's counters for the checkpoint at ``learner_step`` (atomic write)."""
    path = os.path.join(logdir, CHECKPOINT_SUBDIR, COUNTERS_FILE)
    table = _read_json(path)
    table[str(int(learner_step))] = dict(values)
    newest = sorted(table, key=int)[-keep:]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({k: table[k] for k in newest}, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def load_counters(logdir: str, learner_step: int) -> Dict[str, Any]:
    """The counters saved with the checkpoint at ``learner_step`` (or the newest before it)."""
    table = _read_json(os.path.join(logdir, CHECKPOINT_SUBDIR, COUNTERS_FILE))
    steps = [int(k) for k in table if int(k) <= learner_step]
    return dict(table[str(max(steps))]) if steps else {}


def _read_json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
