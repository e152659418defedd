"""IMPALA as an ``AgentBuilder``: the factories a layout calls, in any process.

Replay is a bounded FIFO queue of unrolls (``tables.make_queue_table``): each
unroll is consumed exactly once, in order, and when the learner falls behind
the queue fills and actors' inserts block (back-pressure) rather than memory
growing. The builder holds only frozen values, so it pickles cheaply.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from rlplat_agents.impala.config import IMPALAConfig
from rlplat import core

if TYPE_CHECKING:  # annotations only: building a builder imports neither TF nor Reverb
    import reverb

    from rlplat.replication import Replicator
    from rlplat.specs import EnvironmentSpec


@dataclasses.dataclass(frozen=True)
class IMPALABuilder(core.AgentBuilder):
    """Builds IMPALA's queue, adder, learner and actors from an ``IMPALAConfig``.

    Attributes:
      config: the agent's hyperparameters.
      steps_per_call: learner steps per ``learner.step()`` (one tf.function call).
      replay_table: name of the Reverb queue.
      rate_limiter_timeout_ms: how long one learner sample may wait on an
        empty queue before the run fails with ReplayTimeoutError.
      insert_timeout_s: how long an actor's insert may wait on a full queue.
    """

    config: IMPALAConfig = IMPALAConfig()
    steps_per_call: int = 4
    replay_table: str = "impala_queue"
    rate_limiter_timeout_ms: int = 300_000
    insert_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if not isinstance(self.config, IMPALAConfig):
            raise TypeError(f"config must be an IMPALAConfig (got {type(self.config).__name__})")
        for name in ("steps_per_call", "rate_limiter_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if not self.insert_timeout_s > 0:
            raise ValueError(f"insert_timeout_s must be > 0 (got {self.insert_timeout_s})")

    # ------------------------------------------------------------------ replay
    def signature(self, environment_spec: EnvironmentSpec) -> Any:
        """The queue's ``SequenceStep`` signature for ``environment_spec``."""
        from rlplat_agents.impala import acting  # pylint: disable=g-import-not-at-top
        from rlplat.replay.sequence_signature import sequence_signature  # pylint: disable=g-import-not-at-top

        return sequence_signature(environment_spec.observations,
                                  acting.action_spec_for_replay(environment_spec),
                                  acting.extras_spec(environment_spec, self.config),
                                  self.config.unroll_length)

    def make_replay_tables(self, environment_spec: EnvironmentSpec, num_actors: int) -> List[reverb.Table]:
        """One bounded FIFO queue of ``queue_size`` unrolls (``num_actors`` is not needed)."""
        del num_actors
        from rlplat.replay import tables  # pylint: disable=g-import-not-at-top

        return [tables.make_queue_table(self.replay_table, self.config.queue_size,
                                        self.signature(environment_spec))]

    def make_adder(self, replay_address: str, environment_spec: EnvironmentSpec) -> core.Adder:
        """A ``SequenceAdder`` writing unrolls of ``unroll_length`` to the queue."""
        from rlplat.replay import reverb_client  # pylint: disable=g-import-not-at-top  (no TF API: actors)
        from rlplat.replay.sequence_adder import SequenceAdder  # pylint: disable=g-import-not-at-top

        return SequenceAdder(reverb_client.Client(replay_address), self.replay_table,
                             self.config.unroll_length, signature=self.signature(environment_spec),
                             insert_timeout_s=self.insert_timeout_s)

    # ----------------------------------------------------------------- learner
    def make_dataset(self, replay_address: str, environment_spec: EnvironmentSpec, batch_size: int) -> Any:
        """Batches of ``batch_size`` unrolls from the queue, in FIFO order."""
        from rlplat.replay import datasets  # pylint: disable=g-import-not-at-top

        # One sampling worker keeps the queue's order, and few samples in
        # flight keep prefetched unrolls (whose lag grows while they wait) few.
        return datasets.make_transition_dataset(
            replay_address, self.replay_table, batch_size,
            signature=self.signature(environment_spec),
            rate_limiter_timeout_ms=self.rate_limiter_timeout_ms,
            max_in_flight_samples_per_worker=batch_size, num_workers_per_iterator=1, prefetch=1)

    def make_input_fn(self, replay_address: str, environment_spec: EnvironmentSpec) -> core.InputFn:
        """Per-replica batches of unrolls from the queue (``make_dataset``)."""

        def input_fn(input_context: Any) -> Any:
            per_replica = input_context.get_per_replica_batch_size(self.config.global_batch_size)
            return self.make_dataset(replay_address, environment_spec, per_replica)

        return input_fn

    def make_learner(self, environment_spec: EnvironmentSpec, replicator: Replicator, replay_address: str,
                     logdir: Optional[str] = None) -> core.Learner:
        """The learner, sampling global batches of unrolls from ``replay_address``."""
        del logdir  # The caller owns logs and checkpoints (``learner.checkpointables()``).
        from rlplat_agents.impala.learning import IMPALALearner  # pylint: disable=g-import-not-at-top

        cfg = self.config
        input_fn = self.make_input_fn(replay_address, environment_spec)
        return IMPALALearner(cfg, environment_spec, replicator, replicator.distribute(input_fn),
                             steps_per_call=self.steps_per_call, replay_address=replay_address,
                             replay_table=self.replay_table,
                             rate_limiter_timeout_ms=self.rate_limiter_timeout_ms)

    # ------------------------------------------------------------------ policy
    def make_networks(self, environment_spec: EnvironmentSpec) -> Dict[str, Any]:
        """``{"network": ...}``: the one policy-and-value network ``IMPALALearner`` trains."""
        from rlplat_agents.impala import networks  # pylint: disable=g-import-not-at-top

        return {"network": networks.make_network(environment_spec, self.config)}

    def make_policy_network(self, environment_spec: EnvironmentSpec) -> Tuple[Dict[str, Any], List[Any]]:
        """``{"network": network}`` and ``networks.acting_variables``, as ``IMPALALearner`` has them.

        The value head comes along (it is part of the one checkpointed
        network) but actors never read it.
        """
        from rlplat_agents.impala import networks  # pylint: disable=g-import-not-at-top

        network = self.make_networks(environment_spec)["network"]
        return {"network": network}, networks.acting_variables(network)

    def check_export(self) -> None:
        """``rlplat export`` serves the MLP core only (a SavedModel call keeps no LSTM state between calls)."""
        if self.config.core != "mlp":
            raise ValueError(f"IMPALA's --core {self.config.core} policy carries recurrent state between "
                             "steps, which the exported policy does not keep; export a --core mlp run")

    def make_greedy_policy(self, objects: Dict[str, Any], environment_spec: EnvironmentSpec) -> Any:
        """The greedy ``IMPALAActor``'s action in TensorFlow (``rlplat export``; MLP core only)."""
        del environment_spec  # the network is already shaped for it
        self.check_export()
        from rlplat_agents.impala import networks  # pylint: disable=g-import-not-at-top

        network = objects["network"]
        return lambda observations: networks.greedy_actions(network, observations, self.config.squash)

    # ------------------------------------------------------------------- actor
    def make_actor(self, environment_spec: EnvironmentSpec, variable_source: core.VariableSource,
                   adder: Optional[core.Adder], actor_index: int, seed: int,
                   evaluation: bool = False) -> core.Actor:
        """A NumPy-policy actor; greedy and adder-free when ``evaluation``."""
        del actor_index  # Every actor samples from the same policy.
        from rlplat_agents.impala import acting  # pylint: disable=g-import-not-at-top

        return acting.IMPALAActor(acting.make_numpy_policy(environment_spec, self.config),
                                  environment_spec.actions, variable_source,
                                  None if evaluation else adder, seed=seed, evaluation=evaluation,
                                  variable_update_period=self.config.variable_update_period,
                                  squash=self.config.squash,
                                  log_std_bounds=(self.config.min_log_std, self.config.max_log_std))

    def make_vector_actor(self, environment_spec: EnvironmentSpec, variable_source: core.VariableSource,
                          replay_address: Optional[str], seeds: Sequence[int],
                          actor_indices: Optional[Sequence[int]] = None) -> Optional[Any]:
        """One ``IMPALAVectorActor`` for ``len(seeds)`` environments (feed-forward cores; None for LSTM).

        Each environment samples and records as ``make_actor``'s actor with
        its seed would, through one ``BatchSequenceAdder`` stream of its own
        (IMPALA's actors do not depend on their index).
        """
        del actor_indices
        if self.config.core == "lstm":
            return None  # Per-environment core states: one IMPALAActor each.
        from rlplat_agents.impala import vector_acting  # pylint: disable=g-import-not-at-top

        return vector_acting.make_vector_actor(self, environment_spec, variable_source, replay_address, seeds)
