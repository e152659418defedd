"""DDPG's ``AgentBuilder``: n-step transition replay (``rlplat.replay``), learner, ``rlplat.gaussian_actor``."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from rlplat_agents.ddpg.config import DDPGConfig
from rlplat import core

if TYPE_CHECKING:  # annotations only: building a builder imports neither TF nor Reverb
    import reverb
    from rlplat.replication import Replicator
    from rlplat.specs import EnvironmentSpec


@dataclasses.dataclass(frozen=True)
class DDPGBuilder(core.AgentBuilder):
    """Builds DDPG's table, adder, learner and actors; holds only the config, so it pickles cheaply."""

    config: DDPGConfig = DDPGConfig()

    def _replay(self) -> Any:
        from rlplat.replay.transition_replay import TransitionReplay  # pylint: disable=g-import-not-at-top

        return TransitionReplay.from_config(self.config)

    def make_replay_tables(self, environment_spec: EnvironmentSpec, num_actors: int) -> List[reverb.Table]:
        return self._replay().make_tables(environment_spec, num_actors)

    def make_adder(self, replay_address: str, environment_spec: EnvironmentSpec) -> core.Adder:
        return self._replay().make_adder(replay_address, environment_spec)

    def make_input_fn(self, replay_address: str, environment_spec: EnvironmentSpec) -> core.InputFn:
        return self._replay().make_input_fn(replay_address, environment_spec)

    def make_learner(self, environment_spec: EnvironmentSpec, replicator: Replicator, replay_address: str,
                     logdir: Optional[str] = None) -> core.Learner:
        from rlplat_agents.ddpg.learning import DDPGLearner  # pylint: disable=g-import-not-at-top

        iterator = replicator.distribute(self.make_input_fn(replay_address, environment_spec))
        return DDPGLearner(self.config, environment_spec, replicator, iterator,
                           **self._replay().learner_kwargs(replay_address))

    def make_networks(self, environment_spec: EnvironmentSpec) -> Dict[str, Any]:
        from rlplat_agents.ddpg.learning import make_networks  # pylint: disable=g-import-not-at-top

        return dict(zip(("policy", "critic"), make_networks(self.config, environment_spec)))

    def make_policy_network(self, environment_spec: EnvironmentSpec) -> Tuple[Dict[str, Any], List[Any]]:
        policy = self.make_networks(environment_spec)["policy"]
        return {"policy": policy}, list(policy.variables)

    def make_greedy_policy(self, objects: Dict[str, Any], environment_spec: EnvironmentSpec) -> Any:
        """The greedy ``GaussianActor``'s action in TensorFlow (``rlplat export``)."""
        del environment_spec  # the policy network is already shaped for it
        from rlplat.gaussian_actor import greedy_policy  # pylint: disable=g-import-not-at-top

        return greedy_policy(objects["policy"])

    def make_actor(self, environment_spec: EnvironmentSpec, variable_source: core.VariableSource,
                   adder: Optional[core.Adder], actor_index: int, seed: int, evaluation: bool = False) -> core.Actor:
        """Every actor explores with N(0, sigma^2); greedy and adder-free when ``evaluation``."""
        from rlplat.gaussian_actor import GaussianActor  # pylint: disable=g-import-not-at-top

        cfg = self.config
        return GaussianActor.for_policy(self.make_policy_network(environment_spec)[0]["policy"], variable_source,
                                        None if evaluation else adder, sigma=cfg.sigma, seed=seed,
                                        evaluation=evaluation, variable_update_period=cfg.variable_update_period)

    def make_vector_actor(self, environment_spec: EnvironmentSpec, variable_source: core.VariableSource,
                          replay_address: Optional[str], seeds: Sequence[int],
                          actor_indices: Optional[Sequence[int]] = None) -> Any:
        """One ``GaussianVectorActor`` for K environments, each acting and recording as a ``make_actor`` actor."""
        from rlplat.gaussian_actor import GaussianVectorActor  # pylint: disable=g-import-not-at-top

        del actor_indices  # every DDPG actor has the same sigma
        k = len(seeds)
        adder = self._replay().make_vector_adder(replay_address, environment_spec, k) if replay_address else None
        return GaussianVectorActor.for_policy(self.make_policy_network(environment_spec)[0]["policy"], variable_source,
                                              adder, seeds, [self.config.sigma] * k,
                                              variable_update_period=self.config.variable_update_period)
