"""IMPALA networks: shapes per core/action kind, and the NumPy acting copy equals Keras."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.impala import networks
from impala_testlib import CONTINUOUS_SPEC, DISCRETE_SPEC, NUM_ACTIONS, OBS, small_config

CASES = [("mlp", DISCRETE_SPEC), ("lstm", DISCRETE_SPEC), ("mlp", CONTINUOUS_SPEC),
         ("lstm", CONTINUOUS_SPEC)]


@pytest.mark.parametrize("core, spec", CASES)
def test_unroll_shapes(core, spec):
    net = networks.make_network(spec, small_config(core=core))
    policy, values = net.unroll(tf.zeros((3, 6, OBS)), net.initial_state(3))
    outputs = NUM_ACTIONS if net.discrete else 2 * 2
    assert policy.shape == (3, 6, outputs) and values.shape == (3, 6)
    assert net.state_size == (16 if core == "lstm" else 0)


@pytest.mark.parametrize("core, spec", CASES)
def test_numpy_policy_matches_keras_step_by_step(core, spec):
    net = networks.make_network(spec, small_config(core=core))
    # Non-trivial weights everywhere (the policy head starts near zero).
    rng = np.random.default_rng(0)
    for v in net.variables:
        v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
    net.obs_var.assign(rng.uniform(0.1, 4.0, net.obs_var.shape).astype(np.float32))
    policy = networks.numpy_policy_of(net)
    obs = rng.normal(size=(1, 7, OBS)).astype(np.float32)
    state0 = rng.normal(size=(1, net.state_size)).astype(np.float32) if net.state_size else None
    keras_out, _ = net.unroll(obs, state0)
    state = None if state0 is None else state0[0]
    for t in range(7):
        out, state = policy(obs[0, t], state)
        np.testing.assert_allclose(out, keras_out[0, t].numpy(), rtol=1e-4, atol=1e-5)
    assert (state is None) == (core == "mlp")


def test_gaussian_log_std_is_squashed_into_its_bounds():
    raw = np.array([-100.0, 0.0, 100.0], np.float32)
    squashed = networks.squash_log_std(raw)
    np.testing.assert_allclose(squashed, [networks.LOG_STD_MIN, -2.0, networks.LOG_STD_MAX],
                               atol=1e-5)
    np.testing.assert_allclose(networks.squash_log_std(tf.constant(raw)).numpy(), squashed)


def test_observation_moments_match_numpy_over_batches_and_normalise_the_input():
    net = networks.make_network(CONTINUOUS_SPEC, small_config())
    rng = np.random.default_rng(0)
    batches = [rng.normal(5.0, 3.0, (n, OBS)) * np.arange(1, OBS + 1) for n in (7, 300, 1, 40)]
    for x in batches:
        shifted = x - net.obs_mean.numpy()
        net.update_observation_moments(len(x), shifted.sum(0).astype(np.float32),
                                       (shifted ** 2).sum(0).astype(np.float32))
    everything = np.concatenate(batches)
    np.testing.assert_allclose(net.obs_mean.numpy(), everything.mean(0), rtol=1e-5)
    np.testing.assert_allclose(net.obs_var.numpy(), everything.var(0), rtol=1e-4)
    assert net.obs_count.numpy() == len(everything)
    # An empty batch changes nothing.
    net.update_observation_moments(0, np.zeros(OBS, np.float32), np.zeros(OBS, np.float32))
    np.testing.assert_allclose(net.obs_var.numpy(), everything.var(0), rtol=1e-4)
    z = net.normalize(everything.astype(np.float32)).numpy()
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(z.std(0), 1.0, rtol=1e-3)
    assert net.normalize(np.full((1, OBS), 1e6, np.float32)).numpy().max() == networks.OBS_NORM_CLIP
    # The moments travel with the acting weights.
    assert networks.acting_variables(net)[:2] == [net.obs_mean, net.obs_var]


def test_initial_gaussian_log_std_and_separate_value_torso():
    config = small_config(init_log_std=-1.2)
    net = networks.make_network(CONTINUOUS_SPEC, config)
    _, log_std = net.gaussian(net.unroll(tf.zeros((2, 3, OBS)))[0])
    np.testing.assert_allclose(log_std.numpy(), -1.2, atol=0.05)
    assert net.value_torso and not any(
        v is w for v in networks.acting_variables(net) for layer in net.value_torso
        for w in layer.trainable_variables)
    # The policy's features get no gradient from the value.
    with tf.GradientTape() as tape:
        values = net.unroll(tf.random.normal((2, 3, OBS)))[1]
    grads = tape.gradient(values, [layer.kernel for layer in net.torso])
    assert all(g is None for g in grads)
    shared = networks.make_network(CONTINUOUS_SPEC, config.replace(separate_value_network=False))
    assert not shared.value_torso


def test_numpy_policy_rejects_weights_of_another_config():
    net = networks.make_network(DISCRETE_SPEC, small_config(core="lstm"))
    policy = networks.numpy_policy_of(networks.make_network(DISCRETE_SPEC, small_config(core="mlp")))
    with pytest.raises(ValueError, match="different configs"):
        policy.load([v.numpy() for v in networks.acting_variables(net)])
