"""DDPG's ``AgentBuilder``: its networks and learner; replay and actors are ``rlplat.dpg_builder``'s."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Dict, Optional

from rlplat_agents.ddpg.config import DDPGConfig
from rlplat import core
from rlplat.dpg_builder import DPGBuilder

if TYPE_CHECKING:  # annotations only: building a builder imports neither TF nor Reverb
    from rlplat.replication import Replicator
    from rlplat.specs import EnvironmentSpec


@dataclasses.dataclass(frozen=True)
class DDPGBuilder(DPGBuilder):
    """Builds DDPG's learner and networks; holds only the config, so it pickles cheaply."""

    config: DDPGConfig = DDPGConfig()

    def make_learner(self, environment_spec: EnvironmentSpec, replicator: Replicator, replay_address: str,
                     logdir: Optional[str] = None) -> core.Learner:
        from rlplat_agents.ddpg.learning import DDPGLearner  # pylint: disable=g-import-not-at-top

        iterator = replicator.distribute(self.make_input_fn(replay_address, environment_spec))
        return DDPGLearner(self.config, environment_spec, replicator, iterator,
                           **self.replay().learner_kwargs(replay_address))

    def make_networks(self, environment_spec: EnvironmentSpec) -> Dict[str, Any]:
        from rlplat_agents.ddpg.learning import make_networks  # pylint: disable=g-import-not-at-top

        return dict(zip(("policy", "critic"), make_networks(self.config, environment_spec)))
