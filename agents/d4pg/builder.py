"""D4PG as an ``AgentBuilder``: the factories a layout calls, in any process.

It holds only frozen values (the config and a few runtime knobs), so Ray ships
it cheaply; everything with a thread, a socket or a TF variable is made by the
factories inside the process that uses it.

Exploration noise per actor (``sigma_schedule``):

* ``"constant"`` (default, as Acme's D4PG): every actor uses ``config.sigma``.
* ``"log"``: actor i uses ``sigma * (sigma_min / sigma) ** frac(i * 0.618...)``,
  a golden-ratio (low-discrepancy) walk over [sigma_min, sigma] in log space:
  any number of actors covers the range evenly, actor 0 keeps ``config.sigma``,
  and adding or restarting actors never changes another actor's sigma (the
  Ape-X ``eps ** (1 + i / (N - 1) * alpha)`` schedule needs N and reshuffles
  every actor when N changes).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Dict, Optional

from rlplat_agents.d4pg.config import D4PGConfig
from rlplat import core
from rlplat.dpg_builder import DPGBuilder

if TYPE_CHECKING:  # annotations only: building a builder imports neither TF nor Reverb

    from rlplat.replay.packing import TransitionPacking
    from rlplat.replay.transition_replay import TransitionReplay
    from rlplat.replication import Replicator
    from rlplat.specs import EnvironmentSpec

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
SIGMA_SCHEDULES = ("constant", "log")


@dataclasses.dataclass(frozen=True)
class D4PGBuilder(DPGBuilder):
    """Builds D4PG's tables, adder, learner and actors from a ``D4PGConfig``.

    Attributes:
      config: the agent's hyperparameters.
      sigma_schedule: "constant" or "log" (see the module docstring).
      sigma_min: the low end of the "log" schedule.
      steps_per_call: learner steps per ``learner.step()`` (one tf.function call).
      jit_compile: XLA for the learner's loss/gradient maths. Off by default:
        on this CPU XLA's matmuls are slower than oneDNN's (measured; see README).
      replay_table: name of the Reverb table.
      rate_limiter_timeout_ms: how long one learner sample may wait for
        inserts before the run fails with ReplayTimeoutError.
      pack_transitions: store each transition as one packed float32 vector
        (``rlplat.replay.packing``): one Reverb column instead of five, which
        more than halves the actor's write cost and the learner's sampling
        cost. False stores one column per field (easier to read by hand).
    """

    config: D4PGConfig = D4PGConfig()
    sigma_schedule: str = "constant"
    sigma_min: float = 0.05
    steps_per_call: int = 8
    jit_compile: bool = False
    replay_table: str = "priority_table"
    rate_limiter_timeout_ms: int = 300_000
    pack_transitions: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.config, D4PGConfig):
            raise TypeError(f"config must be a D4PGConfig (got {type(self.config).__name__})")
        if self.sigma_schedule not in SIGMA_SCHEDULES:
            raise ValueError(f"sigma_schedule must be one of {SIGMA_SCHEDULES} "
                             f"(got {self.sigma_schedule!r})")
        if self.sigma_schedule == "log" and not 0.0 < self.sigma_min <= self.config.sigma:
            raise ValueError(f"sigma_min must be in (0, sigma={self.config.sigma}] for the log "
                             f"schedule (got {self.sigma_min}); lower --sigma-min or raise --sigma")
        for name in ("steps_per_call", "rate_limiter_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")

    def actor_sigma(self, actor_index: int) -> float:
        """Exploration std of actor ``actor_index`` under ``sigma_schedule``."""
        sigma = self.config.sigma
        if self.sigma_schedule == "constant" or sigma == 0.0:
            return sigma
        fraction = (actor_index * _GOLDEN) % 1.0
        return sigma * (self.sigma_min / sigma) ** fraction

    def replay(self) -> TransitionReplay:
        """The shared n-step transition kit (``rlplat.replay.transition_replay``) with this builder's table."""
        from rlplat.replay.transition_replay import TransitionReplay  # pylint: disable=g-import-not-at-top

        return TransitionReplay.from_config(self.config, table=self.replay_table, pack=self.pack_transitions,
                                            rate_limiter_timeout_ms=self.rate_limiter_timeout_ms)

    def make_packing(self, environment_spec: EnvironmentSpec) -> Optional[TransitionPacking]:
        """The ``TransitionPacking`` of replay items, or None when unpacked."""
        return self.replay().item_format(environment_spec)["packing"]

    def make_learner(self, environment_spec: EnvironmentSpec, replicator: Replicator, replay_address: str,
                     logdir: Optional[str] = None) -> core.Learner:
        """The learner, sampling global batches from ``replay_address`` (the caller owns ``logdir``)."""
        from rlplat_agents.d4pg.learning import D4PGLearner  # pylint: disable=g-import-not-at-top

        iterator = replicator.distribute(self.make_input_fn(replay_address, environment_spec))
        return D4PGLearner(self.config, environment_spec, replicator, iterator, steps_per_call=self.steps_per_call,
                           jit_compile=self.jit_compile, **self.replay().learner_kwargs(replay_address))

    # --------------------------------------------------------------- networks
    def make_networks(self, environment_spec: EnvironmentSpec) -> Dict[str, Any]:
        """``{"policy", "critic"}``, built: what ``D4PGLearner`` makes its online and target pairs with."""
        from rlplat_agents.d4pg import networks  # pylint: disable=g-import-not-at-top

        return networks.make_networks(environment_spec, self.config)
