"""categorical_td_loss and the DPG policy losses."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat.losses import distributional
from rlplat.losses import dpg
from rlplat_agents.d4pg.networks import make_critic_network, make_policy_network
# pytest (prepend import mode) puts this folder on sys.path.
from categorical_reference import log_softmax as _log_softmax, reference_project

V_MIN, V_MAX, N = -10.0, 10.0, 11
ATOMS = np.linspace(V_MIN, V_MAX, N).astype(np.float32)  # spacing 2


def reference_td_loss(q_logits_tm1, r_t, d_t, target_q_logits_t):
    target_p = np.exp(_log_softmax(target_q_logits_t))
    target_z = r_t[:, None] + d_t[:, None] * ATOMS.astype(np.float64)[None, :]
    m = reference_project(target_z, target_p, V_MIN, V_MAX, N)
    return -(m * _log_softmax(q_logits_tm1)).sum(axis=-1)


@pytest.mark.parametrize("seed", [0, 1])
def test_td_loss_matches_numpy_reference(seed):
    rng = np.random.default_rng(seed)
    b = 8
    q_tm1 = rng.normal(0, 2, (b, N)).astype(np.float32)
    q_t = rng.normal(0, 2, (b, N)).astype(np.float32)
    r_t = rng.uniform(-6, 6, b).astype(np.float32)
    d_t = rng.uniform(0, 1, b).astype(np.float32)
    d_t[0] = 0.0  # one terminal in the batch
    got = distributional.categorical_td_loss(q_tm1, r_t, d_t, q_t, ATOMS).numpy()
    assert got.shape == (b,)
    np.testing.assert_allclose(got, reference_td_loss(q_tm1, r_t, d_t, q_t), rtol=1e-5, atol=1e-5)
    graph = tf.function(distributional.categorical_td_loss)(q_tm1, r_t, d_t, q_t, ATOMS).numpy()
    np.testing.assert_allclose(graph, got, rtol=1e-6, atol=1e-6)


def test_terminal_collapses_target_onto_reward():
    rng = np.random.default_rng(7)
    q_tm1 = rng.normal(size=(2, N)).astype(np.float32)
    q_t = rng.normal(0, 3, (2, N)).astype(np.float32)  # must not matter
    r_t = np.array([2.0, 3.0], np.float32)  # on atom 6; halfway between atoms 6 and 7
    got = distributional.categorical_td_loss(q_tm1, r_t, np.zeros(2, np.float32), q_t, ATOMS).numpy()
    ls = _log_softmax(q_tm1)
    np.testing.assert_allclose(got, [-ls[0, 6], -0.5 * (ls[1, 6] + ls[1, 7])], rtol=1e-5)


def test_td_gradient_stops_at_target():
    rng = np.random.default_rng(3)
    q_tm1 = tf.Variable(rng.normal(size=(4, N)).astype(np.float32))
    q_t = tf.Variable(rng.normal(size=(4, N)).astype(np.float32))
    r_t = np.array([0.0, 1.0, -3.0, 20.0], np.float32)
    d_t = np.array([0.9, 0.0, 0.5, 0.99], np.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(distributional.categorical_td_loss(q_tm1, r_t, d_t, q_t, ATOMS))
    g_online, g_target = tape.gradient(loss, [q_tm1, q_t])
    assert g_target is None
    # d CE / d logits = softmax(logits) - target distribution.
    target_z = r_t[:, None] + d_t[:, None] * ATOMS[None, :]
    m = reference_project(target_z, np.exp(_log_softmax(q_t.numpy())), V_MIN, V_MAX, N)
    np.testing.assert_allclose(g_online.numpy(), np.exp(_log_softmax(q_tm1.numpy())) - m,
                               atol=1e-5)


def test_policy_loss_value_is_minus_expected_q():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(5, N)).astype(np.float32)
    p = np.exp(_log_softmax(logits))
    by_hand = -(p * ATOMS).sum(axis=-1)
    got = dpg.dpg_policy_loss(logits, ATOMS).numpy()
    assert got.shape == (5,)
    np.testing.assert_allclose(got, by_hand, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tf.reduce_mean(got).numpy(), by_hand.mean(), rtol=1e-5, atol=1e-5)


def _tiny_actor_critic():
    tf.keras.utils.set_random_seed(11)
    policy = make_policy_network(2, (8, 8))
    critic = make_critic_network(N, (16, 16), V_MIN, V_MAX)
    obs = tf.constant(np.random.default_rng(5).normal(size=(16, 3)).astype(np.float32))
    critic((obs, policy(obs)))
    return policy, critic, obs


def _mean_q(policy, critic, obs):
    return float(tf.reduce_mean(distributional.expected_q(critic((obs, policy(obs))), critic.atoms)))


def test_one_sgd_step_on_policy_loss_increases_expected_q():
    policy, critic, obs = _tiny_actor_critic()
    critic_before = [w.numpy().copy() for w in critic.trainable_variables]
    q_before = _mean_q(policy, critic, obs)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(dpg.dpg_policy_loss(critic((obs, policy(obs))), critic.atoms))
    grads = tape.gradient(loss, policy.trainable_variables)
    assert all(g is not None for g in grads)
    tf.keras.optimizers.SGD(learning_rate=0.5).apply_gradients(
        zip(grads, policy.trainable_variables))
    q_after = _mean_q(policy, critic, obs)
    assert q_after > q_before + 1e-6, (q_before, q_after)
    for before, w in zip(critic_before, critic.trainable_variables):
        np.testing.assert_array_equal(before, w.numpy())  # critic untouched


def test_dqda_form_gives_same_policy_gradient_and_clips():
    policy, critic, obs = _tiny_actor_critic()
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(dpg.dpg_policy_loss(critic((obs, policy(obs))), critic.atoms))
    direct = tape.gradient(loss, policy.trainable_variables)

    with tf.GradientTape(persistent=True) as tape:
        actions = policy(obs)
        tape.watch(actions)
        q = distributional.expected_q(critic((obs, actions)), critic.atoms)
        # Mean over the batch, so dqda is scaled like the direct form's loss.
        dqda = tape.gradient(tf.reduce_mean(q), actions)
        loss = tf.reduce_sum(dpg.dpg_dqda_loss(dqda, actions))
    via_dqda = tape.gradient(loss, policy.trainable_variables)
    for a, b in zip(direct, via_dqda):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-8)

    # Clipping is by each example's norm, not per element: the direction stays.
    a = tf.zeros((1, 2))
    big = tf.constant([[3.0, -4.0]])  # norm 5 -> scaled by 1/5
    with tf.GradientTape() as tape:
        tape.watch(a)
        clipped = dpg.dpg_dqda_loss(big, a, dqda_clip_norm=1.0)
    np.testing.assert_allclose(tape.gradient(clipped, a).numpy(), [[-0.6, 0.8]], rtol=1e-6)
    np.testing.assert_allclose(clipped.numpy(), [0.5], rtol=1e-6)
    with pytest.raises(ValueError, match="dqda_clip_norm"):
        dpg.dpg_dqda_loss(big, a, dqda_clip_norm=0.0)


def _numpy_dqda_loss_and_grad(dqda, actions, clip_norm):
    """NumPy reference: per-example norm clipping, loss and d(sum loss)/da."""
    g = np.array(dqda, np.float64)
    if clip_norm is not None:
        norms = np.linalg.norm(g, axis=-1, keepdims=True)
        g = g * np.minimum(1.0, clip_norm / np.maximum(norms, 1e-300))
    return 0.5 * np.sum(g ** 2, axis=-1), -g


@pytest.mark.parametrize("action_dims", [1, 6])
@pytest.mark.parametrize("clip_norm", [None, 1.0, 0.3])
def test_dqda_loss_matches_numpy_reference(action_dims, clip_norm):
    rng = np.random.default_rng(action_dims)
    # Rows with norms well below and well above the clip, and one all-zero row.
    dqda = rng.normal(size=(16, action_dims)) * rng.choice([0.01, 0.5, 5.0], size=(16, 1))
    dqda[3] = 0.0
    actions = tf.constant(rng.uniform(-1, 1, size=(16, action_dims)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(actions)
        loss = dpg.dpg_dqda_loss(tf.constant(dqda, tf.float32), actions, clip_norm)
    want_loss, want_grad = _numpy_dqda_loss_and_grad(dqda, actions.numpy(), clip_norm)
    np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tape.gradient(loss, actions).numpy(), want_grad, rtol=1e-5, atol=1e-7)
    if clip_norm is not None:  # Some rows really were clipped, so the case is not vacuous.
        assert np.any(np.linalg.norm(dqda, axis=-1) > clip_norm)
        assert np.all(np.linalg.norm(want_grad, axis=-1) <= clip_norm * (1 + 1e-6))
