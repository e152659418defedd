"""Config validation, the data split and the input stream's topology independence."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.supervised import data, networks
from rlplat_agents.supervised.config import SupervisedConfig


@pytest.mark.parametrize("changes, flag", [
    ({"global_batch_size": 0}, "global_batch_size"),
    ({"num_steps": -1}, "num_steps"),
    ({"learning_rate": 0.0}, "learning_rate"),
    ({"learning_rate": float("nan")}, "learning_rate"),
    ({"hidden_sizes": ()}, "hidden_sizes"),
    ({"hidden_sizes": (64, 0)}, "hidden_sizes"),
    ({"seed": -3}, "seed"),
    ({"eval_period": 2.5}, "eval_period"),
    ({"held_out_fraction": 1.0}, "held_out_fraction"),
])
def test_config_errors_are_one_line_and_name_the_flag(changes, flag):
    with pytest.raises(ValueError) as error:
        SupervisedConfig(**changes)
    assert flag in str(error.value) and "\n" not in str(error.value)


def test_config_is_frozen_and_round_trips():
    config = SupervisedConfig(hidden_sizes=[32, 16])
    assert config.hidden_sizes == (32, 16)
    assert SupervisedConfig(**config.to_dict()) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_steps = 3
    with pytest.raises(TypeError, match="unknown"):
        config.replace(num_step=3)
    with pytest.raises(ValueError, match="multiple of 3"):
        SupervisedConfig(global_batch_size=128).check_replicas(3)


def test_split_is_stratified_scaled_and_fixed_by_seed():
    train, held_out = data.load_splits(0)
    assert len(train) + len(held_out) == 1797
    assert train.x.dtype == np.float32 and 0.0 <= train.x.min() and train.x.max() <= 1.0
    assert set(np.bincount(held_out.y)) <= {35, 36, 37}  # 20% of ~180 per class
    again, _ = data.load_splits.__wrapped__(0)
    np.testing.assert_array_equal(train.y, again.y)
    other, _ = data.load_splits(1)
    assert not np.array_equal(train.y, other.y)


def _global_batches(global_batch_size, num_pipelines, replicas_per_pipeline, num_steps, start_step=0):
    """The global batches of `num_steps` steps, assembled as the Replicator would."""
    num_replicas = num_pipelines * replicas_per_pipeline
    input_fn = data.make_input_fn(global_batch_size, seed=0, start_step=start_step)
    streams = []
    for pipeline in range(num_pipelines):
        ctx = tf.distribute.InputContext(num_pipelines, pipeline, num_replicas)
        streams.append(iter(input_fn(ctx)))
    batches = []
    for _ in range(num_steps):
        parts = [next(streams[p])[0].numpy() for p in range(num_pipelines) for _ in range(replicas_per_pipeline)]
        x = np.concatenate(parts)
        batches.append(x[np.lexsort(x.T[::-1])])  # the set of examples, in a canonical order
    return batches


def test_input_stream_is_the_same_for_any_topology_and_resumes_mid_stream():
    one = _global_batches(64, 1, 1, 30)  # 30 * 64 > 1437: crosses an epoch
    for got in (_global_batches(64, 1, 4, 30), _global_batches(64, 2, 1, 30), _global_batches(64, 2, 2, 30)):
        for a, b in zip(one, got):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(one[25:], _global_batches(64, 1, 2, 5, start_step=25)):
        np.testing.assert_array_equal(a, b)


def test_classifier_uses_synchronized_batch_norm():
    model = networks.make_classifier((16,), synchronized_batch_norm=True)
    norms = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.BatchNormalization)]
    assert norms and all(layer.synchronized for layer in norms)
    assert model(tf.zeros([2, data.NUM_FEATURES])).shape == (2, data.NUM_CLASSES)
