"""IMPALAConfig: defaults, validation messages that name the flag, round trips."""

import dataclasses

import pytest

from rlplat_agents.impala.config import IMPALAConfig


def test_defaults_are_valid_and_round_trip():
    config = IMPALAConfig()
    assert config.core == "mlp" and config.max_policy_lag is None
    assert IMPALAConfig(**config.to_dict()) == config
    assert config.replace(core="lstm").core == "lstm"


@pytest.mark.parametrize("changes, fragment", [
    (dict(unroll_length=0), "unroll_length"),
    (dict(global_batch_size=0), "global_batch_size"),
    (dict(discount=1.5), "discount"),
    (dict(learning_rate=0.0), "learning_rate"),
    (dict(entropy_cost=-0.1), "entropy_cost"),
    (dict(core="gru"), "core mlp or core lstm"),
    (dict(layer_sizes=()), "layer_sizes"),
    (dict(layer_sizes=(64, 0)), "layer_sizes"),
    (dict(queue_size=8, global_batch_size=16), "queue_size"),
    (dict(max_policy_lag=-1), "max_policy_lag"),
    (dict(max_policy_lag=1.5), "max_policy_lag"),
    (dict(unroll_length=True), "unroll_length"),
    (dict(discount=float("nan")), "discount"),
])
def test_bad_values_fail_with_one_line_naming_the_flag(changes, fragment):
    with pytest.raises(ValueError) as info:
        IMPALAConfig(**changes)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_replace_rejects_unknown_fields_and_keeps_frozen():
    with pytest.raises(TypeError, match="no_such"):
        IMPALAConfig().replace(no_such=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        IMPALAConfig().core = "lstm"  # type: ignore[misc]
    assert IMPALAConfig(layer_sizes=[8, 8]).layer_sizes == (8, 8)


@pytest.mark.parametrize("argv, want", [
    (["--env", "cartpole:swingup"], 0.1),               # control suite: scaled
    (["--env", "gym:CartPole-v1"], 1.0),                # gym: the config's default
    ([], 1.0),                                          # default env is gym:CartPole-v1
    (["--env", "walker:walk", "--reward-scale", "1"], 1.0),  # an explicit flag wins
    (["--env", "gym:CartPole-v1", "--reward-scale", "0.5"], 0.5),
])
def test_train_impala_scales_control_suite_rewards_unless_told(argv, want):
    import argparse

    from rlplat_agents.impala.spec import SPEC
    from rlplat.launch import agent_command

    parser = argparse.ArgumentParser()
    agent_command.add_arguments(parser, SPEC)
    assert agent_command.config_from_args(SPEC, parser.parse_args(argv)).reward_scale == want
    assert "0.1 for control-suite" in parser.format_help().replace("\n", " ").replace("  ", " ")
