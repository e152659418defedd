"""D4PGConfig: defaults, validation messages, immutability, round-trips."""

import dataclasses
import json

import pytest

from rlplat_agents.d4pg.config import D4PGConfig


def test_defaults_match_paper_and_acme():
    cfg = D4PGConfig()
    assert cfg.n_step == 5
    assert cfg.discount == 0.99
    assert cfg.sigma == 0.3
    assert cfg.global_batch_size == 256
    assert cfg.samples_per_insert == 32.0
    assert cfg.min_replay_size == 1000
    assert cfg.max_replay_size == 1_000_000
    assert cfg.policy_learning_rate == 3e-4
    assert cfg.critic_learning_rate == 3e-4
    assert cfg.target_update_period == 100
    assert cfg.num_atoms == 51
    assert cfg.v_min == -150.0 and cfg.v_max == 150.0
    assert cfg.policy_layer_sizes == (256, 256, 256)
    assert cfg.critic_layer_sizes == (512, 512, 256)
    assert cfg.clipping is True
    assert cfg.max_gradient_norm == 40.0


@pytest.mark.parametrize("changes, flag", [
    ({"n_step": 0}, "n_step"),
    ({"n_step": 2.5}, "n_step"),
    ({"n_step": True}, "n_step"),
    ({"discount": 1.5}, "discount"),
    ({"discount": -0.1}, "discount"),
    ({"discount": float("nan")}, "discount"),
    ({"sigma": -0.1}, "sigma"),
    ({"global_batch_size": 0}, "global_batch_size"),
    ({"samples_per_insert": 0.0}, "samples_per_insert"),
    ({"min_replay_size": 0}, "min_replay_size"),
    ({"max_replay_size": 10, "min_replay_size": 100}, "max_replay_size"),
    ({"policy_learning_rate": 0.0}, "policy_learning_rate"),
    ({"critic_learning_rate": -1e-3}, "critic_learning_rate"),
    ({"target_update_period": 0}, "target_update_period"),
    ({"num_atoms": 1}, "num_atoms"),
    ({"v_min": 10.0, "v_max": 10.0}, "v_min"),
    ({"v_min": 20.0, "v_max": -20.0}, "v_min"),
    ({"v_max": float("inf")}, "v_max"),
    ({"policy_layer_sizes": ()}, "policy_layer_sizes"),
    ({"critic_layer_sizes": (64, 0)}, "critic_layer_sizes"),
    ({"critic_layer_sizes": "256"}, "critic_layer_sizes"),
    ({"clipping": "yes"}, "clipping"),
    ({"max_gradient_norm": 0.0}, "max_gradient_norm"),
])
def test_invalid_values_raise_one_line_naming_the_field(changes, flag):
    with pytest.raises(ValueError) as info:
        D4PGConfig(**changes)
    message = str(info.value)
    assert "\n" not in message
    assert flag in message and "--" not in message  # the command line spells fields as flags
    # Same check through replace(): the copy is validated too.
    with pytest.raises(ValueError):
        D4PGConfig().replace(**changes)


def test_example_message_is_actionable():
    with pytest.raises(ValueError, match=r"^n_step must be >= 1 \(got 0\); set n_step 1 or more$"):
        D4PGConfig(n_step=0)


def test_frozen():
    cfg = D4PGConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_step = 3  # type: ignore[misc]
    assert cfg.n_step == 5


def test_replace_returns_validated_copy_and_keeps_original():
    cfg = D4PGConfig()
    other = cfg.replace(n_step=3, v_min=-10, v_max=10)
    assert other.n_step == 3 and other.v_min == -10.0 and isinstance(other.v_min, float)
    assert cfg.n_step == 5
    with pytest.raises(TypeError, match="unknown D4PGConfig field"):
        cfg.replace(not_a_field=1)


def test_to_dict_round_trips_through_json():
    cfg = D4PGConfig(policy_layer_sizes=[32, 16], sigma=0)
    assert cfg.policy_layer_sizes == (32, 16)  # lists are stored as tuples
    assert hash(cfg) == hash(D4PGConfig(policy_layer_sizes=(32, 16), sigma=0.0))
    d = cfg.to_dict()
    assert d["policy_layer_sizes"] == [32, 16]
    assert D4PGConfig(**json.loads(json.dumps(d))) == cfg
