"""D4PG networks: shapes, action range, atoms, and the NumPy policy copy."""

import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.d4pg.networks import make_atoms, make_critic_network, make_policy_network
from rlplat.utils import numpy_layers

OBS, ACT = 5, 3


def _built_policy(layer_sizes=(16, 8, 8), seed=0):
    tf.keras.utils.set_random_seed(seed)
    policy = make_policy_network(ACT, layer_sizes)
    policy(tf.zeros((1, OBS)))
    return policy


def _randomise(model, scale, seed):
    # Replace every weight (incl. the near-zero output layer and LayerNorm
    # gamma/beta) so outputs are far from 0 and the comparison has teeth.
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, scale, w.shape).astype(np.float32)
                       for w in model.get_weights()])


def test_policy_shapes_and_initial_actions_near_zero():
    policy = _built_policy()
    obs = np.random.default_rng(0).normal(size=(7, OBS)).astype(np.float32)
    actions = policy(obs).numpy()
    assert actions.shape == (7, ACT) and actions.dtype == np.float32
    # Near-zero output init: the untrained policy barely moves.
    assert np.abs(actions).max() < 0.05


def test_policy_output_stays_in_unit_box_when_saturated():
    policy = _built_policy()
    _randomise(policy, scale=3.0, seed=1)
    obs = np.random.default_rng(1).normal(0, 100, (64, OBS)).astype(np.float32)
    actions = policy(obs).numpy()
    assert np.all(np.abs(actions) <= 1.0)
    assert np.abs(actions).max() > 0.99  # actually saturating, so the bound is tested


def test_critic_shapes_and_atoms():
    critic = make_critic_network(num_atoms=7, layer_sizes=(16, 8), v_min=-3.0, v_max=3.0)
    obs = np.ones((4, OBS), np.float32)
    act = np.zeros((4, ACT), np.float64)  # float64 input is cast, not propagated
    logits = critic((obs, act))
    assert logits.shape == (4, 7) and logits.dtype == tf.float32
    np.testing.assert_allclose(critic.atoms.numpy(), np.linspace(-3, 3, 7), atol=1e-6)
    q = critic.mean(logits).numpy()
    p = tf.nn.softmax(logits).numpy()
    np.testing.assert_allclose(q, (p * np.linspace(-3, 3, 7)).sum(-1), atol=1e-5)
    # Critic input width is obs + action: the first kernel has OBS + ACT rows.
    assert critic.trainable_variables[0].shape == (OBS + ACT, 16)


def test_make_atoms_validates():
    assert make_atoms(-150.0, 150.0, 51).shape == (51,)
    with pytest.raises(ValueError):
        make_atoms(1.0, 1.0, 51)
    with pytest.raises(ValueError):
        make_atoms(-1.0, 1.0, 1)


@pytest.mark.parametrize("layer_sizes", [(16, 8, 8), (12,)])
def test_numpy_forward_matches_keras(layer_sizes):
    policy = _built_policy(layer_sizes, seed=2)
    _randomise(policy, scale=0.5, seed=3)
    params = numpy_layers.export_layers(policy.layers)
    params = pickle.loads(pickle.dumps(params))  # shipped to actors by value
    obs = np.random.default_rng(4).normal(0, 2, (32, OBS)).astype(np.float32)
    expected = policy(obs).numpy()
    assert np.abs(expected).max() > 0.1  # not a trivial all-zeros comparison
    got = numpy_layers.forward(params, obs)[0]
    assert got.dtype == np.float32 and got.shape == (32, ACT)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    single = numpy_layers.forward(params, obs[0])[0]  # actors step at batch 1, unbatched
    assert single.shape == (ACT,)
    np.testing.assert_allclose(single, expected[0], atol=1e-5, rtol=0)


def test_numpy_forward_tracks_weight_updates_only_after_re_export():
    policy = _built_policy(seed=5)
    _randomise(policy, scale=0.5, seed=6)
    obs = np.ones((2, OBS), np.float32)
    old = numpy_layers.export_layers(policy.layers)
    _randomise(policy, scale=0.5, seed=7)
    # The export is a snapshot (copies), not a view of the live variables.
    assert not np.allclose(numpy_layers.forward(old, obs)[0], policy(obs).numpy(), atol=1e-5)
    np.testing.assert_allclose(numpy_layers.forward(numpy_layers.export_layers(policy.layers), obs)[0],
                               policy(obs).numpy(), atol=1e-5)


def test_export_rejects_unbuilt_and_unknown_layers():
    with pytest.raises(ValueError, match="not built"):
        numpy_layers.export_layers(make_policy_network(ACT, (8,)).layers)
    odd = tf.keras.Sequential([tf.keras.layers.Dense(4), tf.keras.layers.Dropout(0.1)])
    odd(tf.zeros((1, OBS)))
    with pytest.raises(ValueError, match="unsupported layer"):
        numpy_layers.export_layers(odd.layers)


def _torso_kernels(model):
    """The layer-norm MLP's kernels in order (not the output layer or head)."""
    return [w.numpy() for w in model.trainable_variables
            if "_dense_" in w.name and "kernel" in w.name]


@pytest.mark.parametrize("mode", ["fan_out", "fan_in"])
def test_torso_weights_follow_the_variance_scaling_formula(mode):
    # Uniform variance scaling 1/3: U(-l, l) with l = sqrt(3 * (1/3) / fan), so
    # Var = 1 / (3 * fan). The reference layer-norm MLP uses fan = fan_out.
    obs = 24
    tf.keras.utils.set_random_seed(3)
    policy = make_policy_network(ACT, (256, 256), init_mode=mode)
    policy(tf.zeros((1, obs)))
    critic = make_critic_network(11, (512, 256), init_mode=mode)
    critic((tf.zeros((1, obs)), tf.zeros((1, ACT))))
    for model in (policy, critic):
        kernels = _torso_kernels(model)
        assert len(kernels) == 2
        first = kernels[0]
        fan_in, fan_out = first.shape
        fan = fan_out if mode == "fan_out" else fan_in
        want = 1.0 / (3.0 * fan)
        # >= 6000 samples: the sample variance is within ~3% of the truth.
        assert first.var() == pytest.approx(want, rel=0.1), (model.name, first.shape)
        limit = np.sqrt(1.0 / fan)
        assert np.abs(first).max() <= limit + 1e-7
        other = 1.0 / (3.0 * (fan_in if mode == "fan_out" else fan_out))
        assert abs(first.var() - other) > 0.5 * want  # The two modes really differ here.
        for kernel in kernels[1:]:
            fan = kernel.shape[1] if mode == "fan_out" else kernel.shape[0]
            assert kernel.var() == pytest.approx(1.0 / (3.0 * fan), rel=0.1)


def test_torso_init_mode_is_validated():
    with pytest.raises(ValueError, match="fan_out"):
        make_policy_network(ACT, (8,), init_mode="glorot")
