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
    ({"n_step": 0}, "--n-step", "to 1 or more"),
    ({"discount": 1.5}, "--discount", "between 0 and 1"),
    ({"sigma": -0.1}, "--sigma", "to 0 or more"),
    ({"tau": 0.0}, "--tau", "above 0 and at most 1"),
    ({"tau": 1.5}, "--tau", "above 0 and at most 1"),
    ({"global_batch_size": 0}, "--global-batch-size", "to 1 or more"),
    ({"global_batch_size": 2048}, "--min-replay-size", "to --global-batch-size (2048) or more"),
    ({"max_replay_size": 999}, "--max-replay-size", "to --min-replay-size (1000) or more"),
    ({"samples_per_insert": 0.1}, "--samples-per-insert", "between 0.256 and 256000"),
    ({"samples_per_insert": 1e9}, "--samples-per-insert", "between 0.256 and 256000"),
    ({"samples_per_insert": -1.0}, "--samples-per-insert", "between"),
    ({"policy_learning_rate": 0.0}, "--policy-learning-rate", "above 0"),
    ({"critic_learning_rate": -1e-3}, "--critic-learning-rate", "above 0"),
    ({"max_gradient_norm": -1.0}, "--max-gradient-norm", "to 0 (off) or more"),
    ({"variable_update_period": 0}, "--variable-update-period", "to 1 or more"),
    ({"n_step": True}, "--n-step", "to a whole number"),
    ({"n_step": 2.5}, "--n-step", "to a whole number"),
    ({"sigma": "0.3"}, "--sigma", "to a finite number"),
    ({"tau": float("nan")}, "--tau", "to a finite number"),
    ({"policy_layer_sizes": (64, 0)}, "--policy-layer-sizes", "like 256,256"),
    ({"critic_layer_sizes": ()}, "--critic-layer-sizes", "like 256,256"),
])
def test_bad_values_raise_one_line_errors_naming_the_flag_and_the_fix(changes, flag, fix):
    with pytest.raises(ValueError) as error:
        DDPGConfig(**changes)
    message = str(error.value)
    assert "\n" not in message and f"set {flag}" in message and fix in message, message
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
