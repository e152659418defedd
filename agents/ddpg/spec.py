"""DDPG's declaration: ``rlplat train ddpg`` runs it on a continuous-control task with N Ray actors."""

from rlplat_agents.ddpg.config import DDPGConfig  # light: no TensorFlow
from rlplat.agent_spec import AgentSpec
from rlplat.replay_rules import TABLE_FIELDS, check_transition_replay

SPEC = AgentSpec(
    name="ddpg",
    help="DDPG (deterministic policy gradient, scalar critic) on a control-suite task with N Ray actors",
    config_class=DDPGConfig,
    builder="rlplat_agents.ddpg.builder:DDPGBuilder",
    continuous_actions=True,
    shape_fields=("policy_layer_sizes", "critic_layer_sizes"),
    replay_fields=TABLE_FIELDS,
    check=check_transition_replay,
)
