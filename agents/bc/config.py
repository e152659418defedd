"""BC hyperparameters: one frozen, validated dataclass; each error names the flag to change."""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from rlplat import config_fields as fields


@dataclasses.dataclass(frozen=True)
class BCConfig:
    """Behaviour cloning of a teacher run's greedy actions (MSE). Never mutate; ``dataclasses.replace``."""

    teacher_logdir: str  # a D4PG run directory: config.json, run_info.json, checkpoints/
    teacher_checkpoint: Optional[int] = None  # its learner step to load; None: the newest checkpoint
    teacher_episodes: int = 10  # greedy teacher episodes recorded as the data set
    rollout_noise: float = 0.2  # their executed actions get N(0, this) added; rows keep the clean ones
    global_batch_size: int = 256  # (observation, action) pairs per step, over all replicas
    learning_rate: float = 1e-3  # Adam
    layer_sizes: Tuple[int, ...] = (256, 256)  # the student's torso (D4PG's policy network)
    steps_per_call: int = 50  # learner steps per learner.step() (one tf.function call)

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, rule: str) -> None:
            if not ok:
                raise ValueError(f"{name} {rule} (got {getattr(self, name)!r}); set {name}")

        need(isinstance(self.teacher_logdir, str) and bool(self.teacher_logdir), "teacher_logdir", "must be a run")
        counts = ("teacher_episodes", "global_batch_size", "steps_per_call")
        fields.check_ints(self, counts + (("teacher_checkpoint",) if self.teacher_checkpoint is not None else ()))
        for name in counts:
            need(getattr(self, name) >= 1, name, "must be >= 1")
        need(self.teacher_checkpoint is None or self.teacher_checkpoint >= 0, "teacher_checkpoint", "must be >= 0")
        fields.check_floats(self, ("learning_rate", "rollout_noise"))
        need(self.learning_rate > 0, "learning_rate", "must be > 0 (e.g. 1e-3)")
        need(self.rollout_noise >= 0, "rollout_noise", "must be >= 0 (0: the teacher's greedy path only)")
        fields.check_layer_sizes(self, ("layer_sizes",), "256,256")
