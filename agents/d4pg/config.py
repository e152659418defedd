"""D4PG hyperparameters: one frozen, validated dataclass.

Defaults follow the D4PG paper (Barth-Maron et al. 2018) and Acme's D4PG
defaults. Every field maps to a command-line flag spelled with dashes
(``n_step`` -> ``--n-step``); validation errors are one line and name the flag
to change, so a launcher can print them verbatim.

Gradient clipping: when ``clipping`` is True the learner is expected to clip
the policy and the critic gradients (separately) by global norm
``max_gradient_norm`` (40.0, as in Acme) before applying them. Clipping is
optional; set ``clipping=False`` to apply raw gradients.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Tuple

from rlplat import config_fields as fields

TORSO_INITS = ("fan_out", "fan_in")


@dataclasses.dataclass(frozen=True)
class D4PGConfig:
    """Validated D4PG hyperparameters. Build, ``replace(...)``, never mutate.

    Attributes:
      n_step: length of the n-step return used for the critic target.
      discount: per-step discount gamma; the learner uses gamma**n_step
        (times the environment's discounts) as the bootstrap discount.
      sigma: std of the Gaussian exploration noise added to the policy's
        [-1, 1] action on actors (0 disables exploration noise).
      global_batch_size: learner batch summed over all replicas; each replica
        sees ``global_batch_size / num_replicas``.
      samples_per_insert: target ratio of sampled to inserted items (rate
        limiter); 32 means each transition is replayed ~32 times on average.
      min_replay_size: items in replay before learning starts.
      max_replay_size: replay capacity (FIFO eviction beyond it).
      policy_learning_rate, critic_learning_rate: Adam learning rates.
      target_update_period: learner steps between hard target-network copies.
      num_atoms, v_min, v_max: the critic's fixed categorical support,
        ``linspace(v_min, v_max, num_atoms)``; returns outside it are clipped.
      policy_layer_sizes, critic_layer_sizes: hidden sizes of the layer-norm
        MLP torsos (see ``agents.d4pg.networks``).
      clipping: clip gradients by global norm ``max_gradient_norm``.
      max_gradient_norm: global-norm threshold used when ``clipping``.
      dqda_clip_norm: clip each example's action-gradient dQ/da to this
        Euclidean norm before the policy update (the reference D4PG clips to
        1 when clipping is on); 0 leaves dQ/da unclipped.
      torso_init: ``"fan_out"`` (uniform variance scaling 1/3 over fan-out,
        as the reference layer-norm MLP) or ``"fan_in"``; see
        ``agents.d4pg.networks``.
      variable_update_period: actor steps between weight pulls. Small,
        because acting on stale weights costs env steps to a good policy,
        and actors on the learner's host read new versions from shared
        memory at no cost (agents/d4pg/README.md, "Tuning notes"). A
        remote actor's pull moves the weights over the network, so with many
        remote actors raise it (clusters/README.md).
    """

    n_step: int = 5
    discount: float = 0.99
    sigma: float = 0.3
    global_batch_size: int = 256
    samples_per_insert: float = 32.0
    min_replay_size: int = 1000
    max_replay_size: int = 1_000_000
    policy_learning_rate: float = 1e-4
    critic_learning_rate: float = 1e-4
    target_update_period: int = 100
    num_atoms: int = 51
    v_min: float = -150.0
    v_max: float = 150.0
    policy_layer_sizes: Tuple[int, ...] = (256, 256, 256)
    critic_layer_sizes: Tuple[int, ...] = (512, 512, 256)
    clipping: bool = True
    max_gradient_norm: float = 40.0
    dqda_clip_norm: float = 1.0
    torso_init: str = "fan_out"
    variable_update_period: int = 10

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
        if not isinstance(self.clipping, bool):
            raise ValueError(f"clipping must be a bool (got {self.clipping!r}); "
                             "set --clipping true or false")
        self._check_ranges()

    def _check_ranges(self) -> None:
        def need(ok: bool, name: str, rule: str, fix: str) -> None:
            if not ok:
                raise ValueError(f"{name} must be {rule} (got "
                                 f"{getattr(self, name)!r}); set {fields.flag(name)} {fix}")

        need(self.n_step >= 1, "n_step", ">= 1", "1 or more")
        need(0.0 <= self.discount <= 1.0, "discount", "in [0, 1]",
             "between 0 and 1 (e.g. 0.99)")
        need(self.sigma >= 0.0, "sigma", ">= 0", "to 0 or more (e.g. 0.3)")
        need(self.global_batch_size >= 1, "global_batch_size", ">= 1",
             "1 or more")
        need(self.samples_per_insert > 0.0, "samples_per_insert", "> 0",
             "above 0 (e.g. 32)")
        need(self.min_replay_size >= 1, "min_replay_size", ">= 1", "1 or more")
        need(self.max_replay_size >= self.min_replay_size, "max_replay_size",
             f">= min_replay_size ({self.min_replay_size})",
             f"to {self.min_replay_size} or more, or lower --min-replay-size")
        need(self.policy_learning_rate > 0.0, "policy_learning_rate", "> 0",
             "above 0 (e.g. 1e-4)")
        need(self.critic_learning_rate > 0.0, "critic_learning_rate", "> 0",
             "above 0 (e.g. 1e-4)")
        need(self.target_update_period >= 1, "target_update_period", ">= 1",
             "1 or more")
        need(self.num_atoms >= 2, "num_atoms", ">= 2", "2 or more (e.g. 51)")
        need(self.v_min < self.v_max, "v_min",
             f"< v_max ({self.v_max!r})",
             "below --v-max, or raise --v-max")
        need(self.dqda_clip_norm >= 0.0, "dqda_clip_norm", ">= 0",
             "to 0 (off) or more (e.g. 1)")
        need(self.torso_init in TORSO_INITS, "torso_init", f"one of {TORSO_INITS}",
             "fan_out or fan_in")
        need(self.variable_update_period >= 1, "variable_update_period", ">= 1",
             "1 or more (e.g. 1000)")
        need(self.max_gradient_norm > 0.0, "max_gradient_norm", "> 0",
             "above 0 (e.g. 40), or set --clipping false")

    def replace(self, **changes: Any) -> "D4PGConfig":
        """Returns a validated copy with ``changes`` applied.

        Raises:
          TypeError: a key is not a D4PGConfig field (as the constructor would).
          ValueError: a new value is invalid (one-line message naming the flag).
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(f"unknown D4PGConfig field(s) {unknown}; "
                            f"valid fields: {sorted(names)}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        """Plain, JSON-serialisable dict; ``D4PGConfig(**cfg.to_dict())`` round-trips."""
        out = dataclasses.asdict(self)
        for name in self._LAYER_FIELDS:
            out[name] = list(out[name])
        return out
