"""D4PG's declaration: ``rlplat train d4pg`` runs it on a control-suite task with N Ray actors."""

from rlplat_agents.d4pg.config import D4PGConfig  # light: no TensorFlow
from rlplat.agent_spec import AgentSpec
from rlplat.replay_rules import TABLE_FIELDS, check_transition_replay

SPEC = AgentSpec(
    name="d4pg",
    help="D4PG (distributional DPG) on a control-suite task with N Ray actors",
    config_class=D4PGConfig,
    builder="rlplat_agents.d4pg.builder:D4PGBuilder",
    continuous_actions=True,
    shape_fields=("policy_layer_sizes", "critic_layer_sizes"),
    replay_fields=TABLE_FIELDS,
    check=check_transition_replay,
)
