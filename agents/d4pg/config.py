"""D4PG hyperparameters: one frozen, validated dataclass.

Defaults follow the D4PG paper (Barth-Maron et al. 2018) and Acme's D4PG
(gradients clipped by global norm 40, policy and critic separately). Each
field is a flag (``n_step``: ``--n-step``); an error is one line naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

from rlplat import config_fields as fields
from rlplat import replay_rules
from rlplat.config_fields import field

TORSO_INITS = ("fan_out", "fan_in")


@dataclasses.dataclass(frozen=True)
class D4PGConfig(fields.ConfigMethods):
    """Validated D4PG hyperparameters. Build, ``replace(...)``, never mutate.

    Each field's flag help says what it is. Beyond that: the learner
    bootstraps with gamma**n_step times the environment's discounts; the
    critic's support is ``linspace(v_min, v_max, num_atoms)`` (returns outside
    it are clipped); ``dqda_clip_norm`` 1 is the reference D4PG's clip when
    clipping is on; ``torso_init`` fan_out scales as the reference layer-norm
    MLP (``agents.d4pg.networks``). ``variable_update_period`` is small
    because acting on stale weights costs env steps, and actors on the
    learner's host read new versions from shared memory at no cost (README,
    "Tuning notes"); with many remote actors raise it (clusters/README.md).
    """

    n_step: int = field(5, "n-step return length")
    discount: float = field(0.99, "per-step discount gamma")
    sigma: float = field(0.3, "std of the Gaussian exploration noise (actions in [-1, 1])")
    global_batch_size: int = field(256, "learner batch over all replicas")
    samples_per_insert: float = field(32.0, "replay sampled-to-inserted ratio the rate limiter holds")
    min_replay_size: int = field(1000, "transitions in replay before learning starts")
    max_replay_size: int = field(1_000_000, "replay capacity")
    policy_learning_rate: float = field(3e-4, "Adam learning rate of the policy (Acme: 1e-4; README, Control suite)")
    critic_learning_rate: float = field(3e-4, "Adam learning rate of the critic")
    target_update_period: int = field(100, "learner steps between target-network copies")
    num_atoms: int = 51
    v_min: float = -150.0
    v_max: float = 150.0
    policy_layer_sizes: Tuple[int, ...] = field((256, 256, 256), "policy MLP widths, comma-separated")
    critic_layer_sizes: Tuple[int, ...] = field((512, 512, 256), "critic MLP widths, comma-separated")
    clipping: bool = field(True, "clip policy and critic gradients by global norm --max-gradient-norm")
    max_gradient_norm: float = field(40.0, "global-norm threshold of the gradient clipping")
    dqda_clip_norm: float = field(1.0, "clip each example's dQ/da to this norm in the policy update (0: off)")
    torso_init: str = field("fan_out", "torso weight init: fan_out (reference) or fan_in")
    variable_update_period: int = field(10, "actor steps between weight pulls")
    precision: str = fields.precision_field(bf16_parity=True)  # shown: tests/agents/d4pg/test_d4pg_precision.py

    # Fields checked by type only; ranges are checked in __post_init__.
    _INT_FIELDS = ("n_step", "global_batch_size", "min_replay_size",
                   "max_replay_size", "target_update_period", "num_atoms",
                   "variable_update_period")
    _FLOAT_FIELDS = ("discount", "sigma", "samples_per_insert",
                     "policy_learning_rate", "critic_learning_rate",
                     "v_min", "v_max", "max_gradient_norm", "dqda_clip_norm")
    _LAYER_FIELDS = ("policy_layer_sizes", "critic_layer_sizes")

    def __post_init__(self) -> None:
        # Types first, so the range checks below compare numbers, not strings.
        # bool is an int subclass; reject it so `n_step=True` is not "1".
        fields.check_ints(self, self._INT_FIELDS)
        fields.check_floats(self, self._FLOAT_FIELDS)
        fields.check_layer_sizes(self, self._LAYER_FIELDS, "256,256")
        fields.check_precision(self)
        if not isinstance(self.clipping, bool):
            raise ValueError(f"clipping must be a bool (got {self.clipping!r}); "
                             "set clipping true or false")
        self._check_ranges()
        replay_rules.check_ratio(self)

    def _check_ranges(self) -> None:
        def need(ok: bool, name: str, rule: str, fix: str) -> None:
            if not ok:
                raise ValueError(f"{name} must be {rule} (got "
                                 f"{getattr(self, name)!r}); set {name} {fix}")

        need(self.n_step >= 1, "n_step", ">= 1", "1 or more")
        need(0.0 <= self.discount <= 1.0, "discount", "in [0, 1]",
             "between 0 and 1 (e.g. 0.99)")
        need(self.sigma >= 0.0, "sigma", ">= 0", "to 0 or more (e.g. 0.3)")
        need(self.global_batch_size >= 1, "global_batch_size", ">= 1",
             "1 or more")
        need(self.min_replay_size >= 1, "min_replay_size", ">= 1", "1 or more")
        need(self.max_replay_size >= self.min_replay_size, "max_replay_size",
             f">= min_replay_size ({self.min_replay_size})",
             f"to {self.min_replay_size} or more, or lower min_replay_size")
        need(self.policy_learning_rate > 0.0, "policy_learning_rate", "> 0",
             "above 0 (e.g. 3e-4)")
        need(self.critic_learning_rate > 0.0, "critic_learning_rate", "> 0",
             "above 0 (e.g. 3e-4)")
        need(self.target_update_period >= 1, "target_update_period", ">= 1",
             "1 or more")
        need(self.num_atoms >= 2, "num_atoms", ">= 2", "2 or more (e.g. 51)")
        need(self.v_min < self.v_max, "v_min",
             f"< v_max ({self.v_max!r})",
             "below v_max, or raise v_max")
        need(self.dqda_clip_norm >= 0.0, "dqda_clip_norm", ">= 0",
             "to 0 (off) or more (e.g. 1)")
        need(self.torso_init in TORSO_INITS, "torso_init", f"one of {TORSO_INITS}",
             "fan_out or fan_in")
        need(self.variable_update_period >= 1, "variable_update_period", ">= 1",
             "1 or more (e.g. 1000)")
        need(self.max_gradient_norm > 0.0, "max_gradient_norm", "> 0",
             "above 0 (e.g. 40), or set clipping false")
