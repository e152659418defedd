"""D4PG as an ``AgentBuilder``: the factories a layout calls, in any process.

The builder holds only plain, frozen values (the ``D4PGConfig`` and a few
runtime knobs), so it pickles in microseconds and Ray can ship it to every
worker; everything with a thread, a socket or a TF variable is made by the
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
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from rlplat_agents.d4pg.config import D4PGConfig
from rlplat import core

if TYPE_CHECKING:  # annotations only: building a builder imports neither TF nor Reverb
    import reverb

    from rlplat.replay.packing import TransitionPacking
    from rlplat.replication import Replicator
    from rlplat.specs import EnvironmentSpec

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
SIGMA_SCHEDULES = ("constant", "log")


@dataclasses.dataclass(frozen=True)
class D4PGBuilder(core.AgentBuilder):
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

    # ------------------------------------------------------------------ replay
    def _signature(self, environment_spec: EnvironmentSpec) -> Any:
        from rlplat.replay.signature import transition_signature  # pylint: disable=g-import-not-at-top

        return transition_signature(environment_spec.observations, environment_spec.actions)

    def make_packing(self, environment_spec: EnvironmentSpec) -> Optional[TransitionPacking]:
        """The ``TransitionPacking`` of replay items, or None when unpacked."""
        if not self.pack_transitions:
            return None
        from rlplat.replay.packing import TransitionPacking  # pylint: disable=g-import-not-at-top

        return TransitionPacking.from_specs(environment_spec.observations,
                                            environment_spec.actions)

    def _table_signature(self, environment_spec: EnvironmentSpec) -> Any:
        packing = self.make_packing(environment_spec)
        if packing is None:
            return self._signature(environment_spec)
        return packing.table_signature

    def make_replay_tables(self, environment_spec: EnvironmentSpec, num_actors: int) -> List[reverb.Table]:
        """One uniform FIFO table, rate-limited to ``samples_per_insert``.

        The limiter is validated against the global batch and ``num_actors``
        (``rlplat.replay.tables.validate_rate_limiter``), so it cannot stall.
        """
        from rlplat.replay import tables  # pylint: disable=g-import-not-at-top

        cfg = self.config
        tables.validate_rate_limiter(cfg.samples_per_insert, cfg.min_replay_size,
                                     cfg.global_batch_size, num_actors,
                                     max_replay_size=cfg.max_replay_size)
        limiter = tables.make_rate_limiter(cfg.samples_per_insert, cfg.min_replay_size,
                                           global_batch_size=cfg.global_batch_size,
                                           num_actors=num_actors)
        return [tables.make_uniform_table(self.replay_table, cfg.max_replay_size, limiter,
                                          self._table_signature(environment_spec))]

    def make_adder(self, replay_address: str, environment_spec: EnvironmentSpec) -> core.Adder:
        """An n-step transition adder (discount already includes gamma^n)."""
        import reverb  # pylint: disable=g-import-not-at-top

        from rlplat.replay.adders import NStepTransitionAdder  # pylint: disable=g-import-not-at-top

        return NStepTransitionAdder(reverb.Client(replay_address), self.replay_table,
                                    self.config.n_step, self.config.discount,
                                    signature=self._signature(environment_spec),
                                    packing=self.make_packing(environment_spec))

    def make_vector_actor(self, environment_spec: EnvironmentSpec, variable_source: core.VariableSource,
                          replay_address: Optional[str], seeds: Sequence[int],
                          actor_indices: Optional[Sequence[int]] = None) -> Optional[Any]:
        """One ``GaussianVectorActor`` for ``len(seeds)`` environments (None when transitions are not packed).

        Environment k acts and records as ``make_actor``'s actor with
        ``seeds[k]`` and ``actor_indices[k]`` (its sigma) would, with
        ``make_adder``'s adder, through a ``VectorNStepAdder`` stream of its own.
        """
        packing = self.make_packing(environment_spec)
        if packing is None:
            return None
        from rlplat_agents.d4pg import acting  # pylint: disable=g-import-not-at-top
        from rlplat.gaussian_actor import GaussianVectorActor  # pylint: disable=g-import-not-at-top

        adder = None
        if replay_address is not None:
            import reverb  # pylint: disable=g-import-not-at-top

            from rlplat.replay.vector_nstep_adder import VectorNStepAdder  # pylint: disable=g-import-not-at-top

            adder = VectorNStepAdder(reverb.Client(replay_address), self.replay_table, self.config.n_step,
                                     self.config.discount, len(seeds), packing=packing)
        indices = range(len(seeds)) if actor_indices is None else actor_indices
        template = acting.policy_template(environment_spec, self.config.policy_layer_sizes)
        return GaussianVectorActor(template, variable_source, adder, seeds,
                                   [self.actor_sigma(i) for i in indices],
                                   variable_update_period=self.config.variable_update_period)

    # ----------------------------------------------------------------- learner
    def make_input_fn(self, replay_address: str, environment_spec: EnvironmentSpec) -> core.InputFn:
        """Global batches of (packed) n-step transitions, split over the input pipelines."""
        from rlplat.replay import datasets  # pylint: disable=g-import-not-at-top

        return datasets.make_input_fn(
            replay_address, self.replay_table, self.config.global_batch_size,
            signature=self._signature(environment_spec),
            packing=self.make_packing(environment_spec),
            rate_limiter_timeout_ms=self.rate_limiter_timeout_ms)

    def make_learner(self, environment_spec: EnvironmentSpec, replicator: Replicator, replay_address: str,
                     logdir: Optional[str] = None) -> core.Learner:
        """The learner, sampling global batches from ``replay_address``.

        ``logdir`` is unused: the caller owns logs and checkpoints (through
        ``learner.checkpointables()``).
        """
        del logdir
        from rlplat_agents.d4pg.learning import D4PGLearner  # pylint: disable=g-import-not-at-top

        cfg = self.config
        input_fn = self.make_input_fn(replay_address, environment_spec)
        return D4PGLearner(cfg, environment_spec, replicator, replicator.distribute(input_fn),
                           steps_per_call=self.steps_per_call, jit_compile=self.jit_compile,
                           replay_address=replay_address, replay_table=self.replay_table,
                           rate_limiter_timeout_ms=self.rate_limiter_timeout_ms)

    # --------------------------------------------------------------- networks
    def make_networks(self, environment_spec: EnvironmentSpec) -> Dict[str, Any]:
        """``{"policy", "critic"}``, built: what ``D4PGLearner`` makes its online and target pairs with."""
        from rlplat_agents.d4pg import networks  # pylint: disable=g-import-not-at-top

        return networks.make_networks(environment_spec, self.config)

    def make_policy_network(self, environment_spec: EnvironmentSpec) -> Tuple[Dict[str, Any], List[Any]]:
        """``{"policy": network}`` and its variables, as ``D4PGLearner`` checkpoints and serves them."""
        policy = self.make_networks(environment_spec)["policy"]
        return {"policy": policy}, list(policy.variables)

    def make_greedy_policy(self, objects: Dict[str, Any], environment_spec: EnvironmentSpec) -> Any:
        """``D4PGActor``'s greedy action in TensorFlow (``rlplat export``)."""
        del environment_spec  # the policy network is already shaped for it
        from rlplat.gaussian_actor import greedy_policy  # pylint: disable=g-import-not-at-top

        return greedy_policy(objects["policy"])

    # ------------------------------------------------------------------- actor
    def make_actor(self, environment_spec: EnvironmentSpec, variable_source: core.VariableSource,
                   adder: Optional[core.Adder], actor_index: int, seed: int,
                   evaluation: bool = False) -> core.Actor:
        """A NumPy-policy actor; greedy and adder-free when ``evaluation``."""
        from rlplat_agents.d4pg import acting  # pylint: disable=g-import-not-at-top

        template = acting.policy_template(environment_spec, self.config.policy_layer_sizes)
        return acting.D4PGActor(template, variable_source, None if evaluation else adder,
                                sigma=self.actor_sigma(actor_index), seed=seed,
                                evaluation=evaluation,
                                variable_update_period=self.config.variable_update_period)
