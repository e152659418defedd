"""DDPG hyperparameters: one frozen, validated dataclass; each field is a flag (``n_step``: ``--n-step``)."""

import dataclasses
from typing import Tuple

from rlplat import config_fields as fields
from rlplat import replay_rules
from rlplat.config_fields import field


@dataclasses.dataclass(frozen=True)
class DDPGConfig(fields.ConfigMethods):
    """DDPG (Lillicrap et al. 2016) with n-step returns; a bad value raises ValueError naming flag and fix."""

    n_step: int = field(3, "n-step return length")
    discount: float = field(0.99, "per-step discount gamma (replay holds gamma^n times the env's discounts)")
    sigma: float = field(0.3, "std of the Gaussian exploration noise (actions in [-1, 1])")
    tau: float = field(0.005, "Polyak rate of the target networks per learner step (1: copy every step)")
    global_batch_size: int = field(256, "learner batch over all replicas")
    samples_per_insert: float = field(256.0, "replay sampled-to-inserted ratio the rate limiter holds")
    min_replay_size: int = field(1000, "transitions in replay before learning starts")
    max_replay_size: int = field(1_000_000, "replay capacity")
    policy_learning_rate: float = field(1e-4, "Adam learning rate of the policy")
    critic_learning_rate: float = field(1e-3, "Adam learning rate of the critic")
    policy_layer_sizes: Tuple[int, ...] = field((256, 256), "policy MLP widths, comma-separated")
    critic_layer_sizes: Tuple[int, ...] = field((256, 256), "critic MLP widths, comma-separated")
    max_gradient_norm: float = field(40.0, "clip each network's gradient to this global norm (0: off)")
    variable_update_period: int = field(10, "actor steps between weight pulls")
    precision: str = fields.precision_field(bf16_parity=True)  # shown: tests/agents/ddpg/test_ddpg_precision.py

    def __post_init__(self) -> None:
        fields.check_ints(self, ("n_step", "global_batch_size", "min_replay_size", "max_replay_size",
                                 "variable_update_period"))
        fields.check_floats(self, ("discount", "sigma", "tau", "samples_per_insert", "policy_learning_rate",
                                   "critic_learning_rate", "max_gradient_norm"))
        fields.check_layer_sizes(self, ("policy_layer_sizes", "critic_layer_sizes"), "256,256")
        fields.check_precision(self)
        batch, warmup = self.global_batch_size, max(1, self.min_replay_size)
        for name, ok, fix in (
                ("n_step", self.n_step >= 1, "to 1 or more"),
                ("discount", 0.0 <= self.discount <= 1.0, "between 0 and 1 (e.g. 0.99)"),
                ("sigma", self.sigma >= 0.0, "to 0 or more (e.g. 0.3)"),
                ("tau", 0.0 < self.tau <= 1.0, "above 0 and at most 1 (e.g. 0.005)"),
                ("global_batch_size", batch >= 1, "to 1 or more"),
                ("min_replay_size", self.min_replay_size >= batch, f"to global_batch_size ({batch}) or more"),
                ("max_replay_size", self.max_replay_size >= warmup, f"to min_replay_size ({warmup}) or more"),
                ("policy_learning_rate", self.policy_learning_rate > 0.0, "above 0 (e.g. 1e-4)"),
                ("critic_learning_rate", self.critic_learning_rate > 0.0, "above 0 (e.g. 1e-3)"),
                ("max_gradient_norm", self.max_gradient_norm >= 0.0, "to 0 (off) or more (e.g. 40)"),
                ("variable_update_period", self.variable_update_period >= 1, "to 1 or more")):
            if not ok:
                raise ValueError(f"{name} is {getattr(self, name)!r}; set {name} {fix}")
        replay_rules.check_ratio(self)
