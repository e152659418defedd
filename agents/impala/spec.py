"""IMPALA's declaration: ``rlplat train impala``, V-trace actor-critic with N Ray actors."""

from typing import Tuple

from rlplat_agents.impala.config import CONTROL_SUITE_REWARD_SCALE, IMPALAConfig  # light: no TensorFlow
from rlplat.agent_spec import AgentSpec, RunFacts


def shape_fields(config: IMPALAConfig) -> Tuple[str, ...]:
    """Config fields that decide the checkpoint's variables: `--resume` may not change them."""
    return ("core", "layer_sizes", "normalize_observations", "separate_value_network") + (
        ("lstm_size",) if config.core == "lstm" else ())


def check(config: IMPALAConfig, facts: RunFacts) -> IMPALAConfig:
    """Control-suite tasks get ``CONTROL_SUITE_REWARD_SCALE`` unless it was set; an LSTM acts one env at a time."""
    if facts.envs_per_actor > 1 and config.core == "lstm":
        raise ValueError("envs_per_actor: an LSTM policy acts one environment at a time (each keeps its "
                         "own recurrent state); drop envs_per_actor or use core mlp")
    if "reward_scale" not in facts.given and not facts.env.startswith("gym:"):
        config = config.replace(reward_scale=CONTROL_SUITE_REWARD_SCALE)
    return config


SPEC = AgentSpec(
    name="impala",
    help="IMPALA (V-trace actor-critic) with N Ray actors; discrete or continuous actions",
    config_class=IMPALAConfig,
    builder="rlplat_agents.impala.builder:IMPALABuilder",
    default_env="gym:CartPole-v1",
    env_help="gym:<id> or DOMAIN:TASK",
    shape_fields=shape_fields,
    # Its learner's input pipeline drains the queue as it fills (a final
    # checkpoint of a 1-actor CartPole run found it empty), and a resumed run
    # refills it with fresh on-policy unrolls within its first actor chunk.
    replay_checkpoint=False,
    replay_checkpoint_refusal=(
        "--replay-checkpoint is for replay-based agents such as d4pg: IMPALA's queue is drained into "
        "the learner as it fills, so there is nothing to restore; drop the flag"),
    check=check,
)
