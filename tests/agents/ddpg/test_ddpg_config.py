"""DDPGConfig: defaults, one-line errors naming the flag and the fix, normalisation, round trips."""

import dataclasses
import json

import pytest

from rlplat_agents.ddpg.config import DDPGConfig
from rlplat import config_fields


def test_defaults_are_valid_and_round_trip_through_json():
    config = DDPGConfig()
    assert DDPGConfig(**json.loads(json.dumps(config.to_dict()))) == config
    assert config.to_dict()["policy_layer_sizes"] == [256, 256]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.tau = 0.5


@pytest.mark.parametrize("changes, flag, fix", [
    ({"n_step": 0}, "n_step", "to 1 or more"),
    ({"discount": 1.5}, "discount", "between 0 and 1"),
    ({"sigma": -0.1}, "sigma", "to 0 or more"),
    ({"tau": 0.0}, "tau", "above 0 and at most 1"),
    ({"tau": 1.5}, "tau", "above 0 and at most 1"),
    ({"global_batch_size": 0}, "global_batch_size", "to 1 or more"),
    ({"global_batch_size": 2048}, "min_replay_size", "to global_batch_size (2048) or more"),
    ({"max_replay_size": 999}, "max_replay_size", "to min_replay_size (1000) or more"),
    ({"samples_per_insert": 0.1}, "samples_per_insert", "would stall the learner"),
    ({"samples_per_insert": 1e9}, "samples_per_insert", "would stall the actors"),
    ({"samples_per_insert": -1.0}, "samples_per_insert", "must be > 0"),
    ({"policy_learning_rate": 0.0}, "policy_learning_rate", "above 0"),
    ({"critic_learning_rate": -1e-3}, "critic_learning_rate", "above 0"),
    ({"max_gradient_norm": -1.0}, "max_gradient_norm", "to 0 (off) or more"),
    ({"variable_update_period": 0}, "variable_update_period", "to 1 or more"),
    ({"n_step": True}, "n_step", "to a whole number"),
    ({"n_step": 2.5}, "n_step", "to a whole number"),
    ({"sigma": "0.3"}, "sigma", "to a finite number"),
    ({"tau": float("nan")}, "tau", "to a finite number"),
    ({"policy_layer_sizes": (64, 0)}, "policy_layer_sizes", "like 256,256"),
    ({"critic_layer_sizes": ()}, "critic_layer_sizes", "like 256,256"),
])
def test_bad_values_raise_one_line_errors_naming_the_flag_and_the_fix(changes, flag, fix):
    with pytest.raises(ValueError) as error:
        DDPGConfig(**changes)
    message = str(error.value)
    assert "\n" not in message and flag in message and fix in message and "--" not in message, message
    with pytest.raises(ValueError):  # replace validates too
        dataclasses.replace(DDPGConfig(), **changes)


def test_values_are_normalised():
    config = DDPGConfig(discount=1, samples_per_insert=64, policy_layer_sizes=[32, 16])
    assert config.discount == 1.0 and isinstance(config.discount, float)
    assert config.samples_per_insert == 64.0 and config.policy_layer_sizes == (32, 16)
    assert DDPGConfig(tau=1.0).tau == 1.0  # hard copies every step are allowed


def test_every_field_has_a_flag_help_text():
    helps = config_fields.flag_helps(DDPGConfig)
    assert list(helps) == [f.name for f in dataclasses.fields(DDPGConfig)]
    assert all(text and "\n" not in text for text in helps.values())
