"""IMPALA hyperparameters: one frozen, validated dataclass.

Loss weights and V-trace clips follow Espeholt et al. 2018 (baseline cost 0.5,
entropy cost 0.01, rho_bar = c_bar = 1). The rest is tuned so gym:CartPole-v1
learns in a few minutes on a 2-core machine: a small MLP, Adam rather than the
paper's RMSProp (less sensitive to the learning rate at this scale), short
unrolls and small batches so the learner keeps up with two actors.

Every field maps to a command-line flag spelled with dashes
(``unroll_length`` -> ``--unroll-length``); validation errors are one line and
name the flag to change.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from rlplat import config_fields as fields
from rlplat.config_fields import field

# Control-suite rewards lie in [0, 1] per step over 1000 steps: at scale 1 the
# Gaussian policy collapsed on cartpole:balance and :swingup, at 0.1 both
# learned (``reward_scale`` below says more). gym: tasks keep the default 1.
CONTROL_SUITE_REWARD_SCALE = 0.1

CORES = ("mlp", "lstm")
SQUASHES = ("tanh", "clip")


@dataclasses.dataclass(frozen=True)
class IMPALAConfig(fields.ConfigMethods):
    """Validated IMPALA hyperparameters. Build, ``replace(...)``, never mutate.

    Attributes:
      unroll_length: T, transitions per unroll (each item holds T + 1 steps).
      global_batch_size: unrolls per learner step, summed over all replicas;
        each replica sees ``global_batch_size / num_replicas``.
      discount: per-step discount gamma (times the environment's discount).
      learning_rate: Adam learning rate.
      adam_epsilon: Adam's epsilon.
      entropy_cost: weight of the entropy bonus.
      baseline_cost: weight of the value (baseline) loss.
      clip_rho_threshold: V-trace rho_bar.
      clip_c_threshold: V-trace c_bar.
      max_gradient_norm: gradients are clipped to this global norm (after
        the all-reduce, so N replicas train like one).
      core: "mlp" (feed-forward) or "lstm" (an LSTM after the MLP torso).
      layer_sizes: hidden sizes of the ReLU MLP torso.
      lstm_size: LSTM units when ``core == "lstm"``.
      queue_size: capacity of the replay queue in unrolls. When full, actors
        block (back-pressure) instead of growing memory.
      max_policy_lag: unrolls whose policy is more than this many learner
        steps behind are dropped from the loss (and counted); None keeps all.
      variable_update_period: actor steps between weight pulls.
      normalize_observations: normalise observations with running moments
        that the learner keeps and actors receive with the policy weights.
      reward_scale: rewards are multiplied by this in the learner's targets.
        With control-suite values near 100 (rewards up to 1 per step) the
        policy-gradient term dwarfs the entropy bonus and the Gaussian policy
        collapses, so ``rlplat train impala`` uses 0.1 for control-suite
        tasks unless ``--reward-scale`` is given. The config's default stays
        1 because 0.1 is no cure-all (agents/impala/README.md has the runs).
      squash: continuous actions only. "tanh": the action is tanh of the
        Gaussian sample (a squashed Gaussian: log-probs include the tanh
        Jacobian, the entropy bonus is the squashed distribution's, estimated
        with one reparameterised sample per step, the greedy action is
        tanh(mean)). "clip": the sample is clipped to [-1, 1] by the actor
        (the Gaussian's own log-prob and entropy; greedy action clip(mean)).
      min_log_std, max_log_std: bounds of the Gaussian's log-std (a smooth
        tanh squash of the head's output).
      init_log_std: the Gaussian's log-std at initialisation.
      separate_value_network: the value head gets its own MLP torso instead
        of sharing the policy's.
      precision: the learner's arithmetic, ``rlplat.precision``: "fp32";
        "bf16" (the MLP torsos in bfloat16; the LSTM core, the heads, the
        weights, Adam, V-trace and the losses in float32); "auto" (bf16 on a
        CPU with bfloat16 instructions, else fp32). Actors stay float32.
    """

    # 100-step unrolls: with 20 the policy gradient leans on a value that is
    # still far from the truth and the Gaussian policy collapses (see the
    # agent's README); 8 of them keep a step at 800 frames.
    unroll_length: int = field(100, "transitions per unroll")
    global_batch_size: int = field(8, "unrolls per learner step over all replicas")
    discount: float = field(0.99, "per-step discount gamma")
    learning_rate: float = field(1e-3, "Adam learning rate")
    adam_epsilon: float = 1e-7
    entropy_cost: float = field(0.01, "weight of the entropy bonus")
    baseline_cost: float = field(0.5, "weight of the value loss")
    clip_rho_threshold: float = field(1.0, "V-trace rho-bar")
    clip_c_threshold: float = field(1.0, "V-trace c-bar")
    max_gradient_norm: float = field(40.0, "clip gradients to this global norm")
    core: str = field("mlp", "network core: mlp or lstm")
    layer_sizes: Tuple[int, ...] = field((64, 64), "MLP torso widths, comma-separated")
    lstm_size: int = field(64, "LSTM units (with --core lstm)")
    queue_size: int = field(128, "replay queue capacity in unrolls (actors block when it is full)")
    max_policy_lag: Optional[int] = field(None, "drop unrolls more than this many learner steps behind "
                                                "(counted as dropped_unrolls)", kind=int, shown="keep all")
    variable_update_period: int = field(100, "actor steps between weight pulls")
    normalize_observations: bool = field(True, "normalise observations with the learner's running moments")
    reward_scale: float = field(1.0, "multiply rewards by this in the learner's targets",
                                shown=f"1 for gym: tasks, {CONTROL_SUITE_REWARD_SCALE:g} for control-suite "
                                      "DOMAIN:TASK tasks")
    squash: str = field("tanh", "continuous actions: tanh (squashed Gaussian) or clip")
    min_log_std: float = field(-5.0, "lower bound of the Gaussian's log-std")
    max_log_std: float = field(1.0, "upper bound of the Gaussian's log-std")
    init_log_std: float = field(-0.5, "the Gaussian's log-std at initialisation")
    separate_value_network: bool = field(True, "give the value head its own MLP torso")
    precision: str = fields.precision_field(bf16_parity=True)  # shown: tests/agents/impala/test_impala_precision.py

    _INT_FIELDS = ("unroll_length", "global_batch_size", "lstm_size", "queue_size",
                   "variable_update_period")
    _FLOAT_FIELDS = ("discount", "learning_rate", "adam_epsilon", "entropy_cost",
                     "baseline_cost", "clip_rho_threshold", "clip_c_threshold",
                     "max_gradient_norm", "reward_scale", "min_log_std", "max_log_std",
                     "init_log_std")

    def __post_init__(self) -> None:
        fields.check_ints(self, self._INT_FIELDS)
        lag = self.max_policy_lag
        if lag is not None and (isinstance(lag, bool) or not isinstance(lag, int)):
            raise ValueError(f"max_policy_lag must be an integer or None (got {lag!r}); "
                             "set max_policy_lag to a whole number or leave it out")
        fields.check_floats(self, self._FLOAT_FIELDS)
        if self.core not in CORES:
            raise ValueError(f"core must be one of {CORES} (got {self.core!r}); "
                             "set core mlp or core lstm")
        if self.squash not in SQUASHES:
            raise ValueError(f"squash must be one of {SQUASHES} (got {self.squash!r}); "
                             "set squash tanh or squash clip")
        for name in ("normalize_observations", "separate_value_network"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False (got {getattr(self, name)!r}); "
                                 f"set {name} to True or False")
        fields.check_layer_sizes(self, ("layer_sizes",), "64,64")
        fields.check_precision(self)
        self._check_ranges()

    def _check_ranges(self) -> None:
        def need(ok: bool, name: str, rule: str, fix: str) -> None:
            if not ok:
                raise ValueError(f"{name} must be {rule} (got {getattr(self, name)!r}); "
                                 f"set {name} {fix}")

        need(self.unroll_length >= 1, "unroll_length", ">= 1", "1 or more (e.g. 20)")
        need(self.global_batch_size >= 1, "global_batch_size", ">= 1", "1 or more (e.g. 32)")
        need(0.0 <= self.discount <= 1.0, "discount", "in [0, 1]", "between 0 and 1 (e.g. 0.99)")
        need(self.learning_rate > 0.0, "learning_rate", "> 0", "above 0 (e.g. 1e-3)")
        need(self.adam_epsilon > 0.0, "adam_epsilon", "> 0", "above 0 (e.g. 1e-7)")
        need(self.entropy_cost >= 0.0, "entropy_cost", ">= 0", "to 0 or more (e.g. 0.01)")
        need(self.baseline_cost >= 0.0, "baseline_cost", ">= 0", "to 0 or more (e.g. 0.5)")
        need(self.clip_rho_threshold > 0.0, "clip_rho_threshold", "> 0", "above 0 (e.g. 1)")
        need(self.clip_c_threshold > 0.0, "clip_c_threshold", "> 0", "above 0 (e.g. 1)")
        need(self.max_gradient_norm > 0.0, "max_gradient_norm", "> 0", "above 0 (e.g. 40)")
        need(self.lstm_size >= 1, "lstm_size", ">= 1", "1 or more (e.g. 64)")
        need(self.queue_size >= self.global_batch_size, "queue_size",
             f">= global_batch_size ({self.global_batch_size})",
             f"to {self.global_batch_size} or more, or lower global_batch_size")
        need(self.max_policy_lag is None or self.max_policy_lag >= 0, "max_policy_lag",
             ">= 0", "to 0 or more, or leave it out to keep every unroll")
        need(self.reward_scale > 0.0, "reward_scale", "> 0", "above 0 (e.g. 1)")
        need(self.min_log_std < self.max_log_std, "min_log_std",
             f"< max_log_std ({self.max_log_std})", "below max_log_std (e.g. -5)")
        need(self.min_log_std < self.init_log_std < self.max_log_std, "init_log_std",
             f"strictly between min_log_std ({self.min_log_std}) and max_log_std "
             f"({self.max_log_std})", "inside the bounds (e.g. -0.5)")
        need(self.variable_update_period >= 1, "variable_update_period", ">= 1",
             "1 or more (e.g. 100)")
