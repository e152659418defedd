"""The driver's counters, saved next to each checkpoint so a resume continues them.

``checkpoints/counters.json`` maps a learner step (a checkpoint) to the
counters at the time it was saved: actor steps, episodes, actor restarts. A
checkpoint whose entry was never written (the driver died between the two
writes) falls back to the newest entry before it, so actor steps can only be
under-counted, never invented.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from rlplat import run_dir


def save_counters(logdir: str, learner_step: int, values: Dict[str, Any], keep: int = 20) -> None:
    """Records the driver's counters for the checkpoint at ``learner_step`` (durable, atomic write).

    A damaged table is replaced by one holding this entry: the checkpoint
    being written is the one a resume will read.
    """
    path = run_dir.counters_path(logdir)
    try:
        table = read_table(logdir)
    except run_dir.RunDirError:
        table = {}
    table[str(int(learner_step))] = dict(values)
    newest = sorted(table, key=int)[-keep:]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    run_dir.write_json(path, {k: table[k] for k in newest})


def read_table(logdir: str) -> Dict[str, Dict[str, Any]]:
    """The counters table ({} when there is none); see ``run_dir.read_counters``."""
    return run_dir.read_counters(logdir)


def load_counters(logdir: str, learner_step: int) -> Dict[str, Any]:
    """The counters saved with the checkpoint at ``learner_step`` (or the newest before it).

    Raises:
      RunDirError: the counters file is damaged (a resume must not restart
        its counts from 0 without a word).
    """
    table = read_table(logdir)
    steps = [int(k) for k in table if int(k) <= learner_step]
    return dict(table[str(max(steps))]) if steps else {}


class RunCounters:
    """What the driver counts over a run, continued from the checkpoint on resume.

    Attributes:
      actor_steps, episodes: environment steps and finished episodes of completed chunks.
      restarts: actor restarts over the whole run.
      physics_errors: simulations that diverged (the episode ended, counted).
      env_errors: other exceptions from an environment (the episode ended, counted).
      learner_steps: the learner's step count as last reported.
      eval: the latest evaluation's result; ``evaluations`` every (actor steps, mean return).
      checkpoint_path: the newest checkpoint recorded.
    """

    def __init__(self, learner_steps: int = 0):
        self.actor_steps = 0
        self.episodes = 0
        self.restarts = 0
        self.physics_errors = 0
        self.env_errors = 0
        self.learner_steps = learner_steps
        self.eval: Dict[str, Any] = {}
        self.evaluations: List[Tuple[int, float]] = []
        self.checkpoint_path: Optional[str] = None
        self.replay_restored_items: Optional[int] = None  # --replay-checkpoint: items replay started with

    def restore(self, logdir: str, learner_step: int) -> None:
        """Continues the counts saved with the checkpoint at ``learner_step``."""
        saved = load_counters(logdir, learner_step)
        self.actor_steps = int(saved.get("actor_steps", 0))
        self.episodes = int(saved.get("episodes", 0))
        self.restarts = int(saved.get("actor_restarts", 0))

    def record_eval(self, result: Dict[str, Any], actor_steps: int) -> None:
        self.eval = result
        if result.get("eval_return") is not None:
            self.evaluations.append((int(actor_steps), float(result["eval_return"])))

    def record_checkpoint(self, logdir: str, saved: Dict[str, Any]) -> None:
        """Notes a saved checkpoint and writes the counts beside it."""
        self.checkpoint_path = saved.get("path") or self.checkpoint_path
        values = {"actor_steps": self.actor_steps, "episodes": self.episodes,
                  "actor_restarts": self.restarts, "learner_steps": int(saved["step"])}
        if "replay_items" in saved:
            values["replay_items"] = int(saved["replay_items"])
        save_counters(logdir, int(saved["step"]), values)
