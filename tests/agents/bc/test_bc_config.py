"""BCConfig: defaults, one-line errors naming the flag, frozen; BCBuilder pickles and refuses a bad teacher."""

import dataclasses
import pickle

import pytest

from rlplat_agents.bc.builder import BCBuilder
from rlplat_agents.bc.config import BCConfig


def test_defaults_and_normalisation():
    cfg = BCConfig(teacher_logdir="runs/teacher", learning_rate=1, layer_sizes=[32, 16])
    assert cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.layer_sizes == (32, 16)  # lists are stored as tuples: the config stays hashable
    assert hash(cfg) == hash(BCConfig(teacher_logdir="runs/teacher", learning_rate=1.0, layer_sizes=(32, 16)))
    assert (cfg.teacher_checkpoint, cfg.teacher_episodes, cfg.global_batch_size, cfg.steps_per_call,
            cfg.rollout_noise) == (None, 10, 256, 50, 0.2)


@pytest.mark.parametrize("changes, flag", [
    (dict(teacher_logdir=""), "teacher_logdir"),
    (dict(teacher_logdir=None), "teacher_logdir"),
    (dict(teacher_checkpoint=-1), "teacher_checkpoint"),
    (dict(teacher_checkpoint=2.5), "teacher_checkpoint"),
    (dict(teacher_episodes=0), "teacher_episodes"),
    (dict(global_batch_size=0), "global_batch_size"),
    (dict(global_batch_size=True), "global_batch_size"),
    (dict(steps_per_call=1.0), "steps_per_call"),
    (dict(learning_rate=0.0), "learning_rate"),
    (dict(learning_rate=float("nan")), "learning_rate"),
    (dict(learning_rate="1e-3"), "learning_rate"),
    (dict(rollout_noise=-0.1), "rollout_noise"),
    (dict(rollout_noise=float("nan")), "rollout_noise"),
    (dict(layer_sizes=()), "layer_sizes"),
    (dict(layer_sizes=(64, 0)), "layer_sizes"),
    (dict(layer_sizes="64,64"), "layer_sizes"),
])
def test_invalid_values_raise_one_line_naming_the_flag(changes, flag):
    with pytest.raises(ValueError) as error:
        BCConfig(**{"teacher_logdir": "runs/teacher", **changes})
    assert "\n" not in str(error.value) and flag in str(error.value), str(error.value)
    valid = BCConfig(teacher_logdir="runs/teacher")
    with pytest.raises(ValueError):  # dataclasses.replace validates the copy too
        dataclasses.replace(valid, **changes)


def test_example_message_is_actionable():
    with pytest.raises(ValueError, match=r"^teacher_episodes must be >= 1 \(got 0\); set teacher_episodes$"):
        BCConfig(teacher_logdir="runs/teacher", teacher_episodes=0)


def test_teacher_logdir_is_required_and_the_config_is_frozen():
    with pytest.raises(TypeError):
        BCConfig()  # pylint: disable=no-value-for-parameter
    cfg = BCConfig(teacher_logdir="runs/teacher")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.teacher_episodes = 3  # type: ignore[misc]


def test_builder_pickles_to_an_equal_value():
    builder = BCBuilder(BCConfig(teacher_logdir="runs/teacher", layer_sizes=(8,)))
    assert pickle.loads(pickle.dumps(builder)) == builder


def test_a_teacher_that_is_not_a_run_is_refused_in_one_line(tmp_path):
    from rlplat import evaluation

    builder = BCBuilder(BCConfig(teacher_logdir=str(tmp_path / "missing")))
    with pytest.raises(evaluation.RunError, match="is not a directory"):
        builder.make_dataset(lambda seed: pytest.fail("no environment before the teacher is found"), 0)
