"""DDPG learner: losses against a NumPy reference, Polyak targets, N-vs-1 replicas, NaN guard, checkpoints."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from ddpg_testlib import (GAMMA, N_STEP, all_weights, copy_weights, make_learner, mlp_numpy, networks, q_numpy,
                          random_batch, small_config)


def _perturb_targets(learner, seed=1):
    """Targets unlike the online networks, so a loss that used the wrong ones would not match."""
    rng = np.random.default_rng(seed)
    for net in (learner.target_policy, learner.target_critic):
        for v in net.variables:
            v.assign(v.numpy() + rng.normal(0, 0.3, v.shape).astype(np.float32))


def _reference_critic_loss(learner, batch):
    """0.5 * mean((r + d * Q'(o', pi'(o')) - Q(o, a))^2) in float64, d = gamma^n (0 at an episode's end)."""
    o_t = batch.next_observation.astype(np.float64)
    target = batch.reward + batch.discount * q_numpy(
        learner.target_critic, o_t, mlp_numpy(learner.target_policy, o_t))
    return 0.5 * np.mean((target - q_numpy(learner.critic, batch.observation, batch.action)) ** 2)


def test_critic_loss_is_the_n_step_td_error_from_the_target_networks():
    batch = random_batch(8, seed=3)
    # Both cases are in the batch: bootstrapped with gamma^n, and ended inside the n steps.
    np.testing.assert_allclose(sorted(set(batch.discount.tolist())), [0.0, GAMMA ** N_STEP], rtol=1e-6)
    learner = make_learner(small_config(), [batch])
    _perturb_targets(learner)
    critic_loss, _, mean_q, _, _ = learner._losses_and_grads(tuple(tf.constant(x) for x in batch))
    want = _reference_critic_loss(learner, batch)
    np.testing.assert_allclose(float(critic_loss), want, rtol=1e-4)
    # Hand-worked for one terminal and one bootstrapped row: the loss is the mean of these.
    o, a, r, d, o2 = (x[:2] for x in batch)
    d = np.array([0.0, GAMMA ** N_STEP])
    q_next = q_numpy(learner.target_critic, o2, mlp_numpy(learner.target_policy, o2))
    by_hand = 0.5 * np.mean((np.array([r[0], r[1] + GAMMA ** 3 * q_next[1]]) - q_numpy(learner.critic, o, a)) ** 2)
    two = batch._replace(discount=d.astype(np.float32))
    loss_two = learner._losses_and_grads(tuple(tf.constant(x[:2]) for x in two))[0]
    np.testing.assert_allclose(float(loss_two), by_hand, rtol=1e-4)
    # mean_q is the critic's value of the policy's own actions at the replayed states.
    pi = mlp_numpy(learner.policy, batch.observation)
    np.testing.assert_allclose(float(mean_q), q_numpy(learner.critic, batch.observation, pi).mean(), rtol=1e-4,
                               atol=1e-6)


def test_gradients_are_those_of_the_td_loss_and_of_minus_mean_q():
    batch = random_batch(8, seed=4)
    learner = make_learner(small_config(), [batch])
    _perturb_targets(learner)
    fields = tuple(tf.constant(x) for x in batch)
    _, _, _, critic_grads, policy_grads = learner._losses_and_grads(fields)
    o, a, r, d, o2 = fields
    with tf.GradientTape(persistent=True) as tape:
        target = r + d * learner.target_critic([o2, learner.target_policy(o2)])
        critic_loss = 0.5 * tf.reduce_mean(tf.square(target - learner.critic([o, a])))
        minus_q = -tf.reduce_mean(learner.critic([o, learner.policy(o)]))
    want_critic = tape.gradient(critic_loss, learner.critic.trainable_variables)
    want_policy = tape.gradient(minus_q, learner.policy.trainable_variables)
    assert tape.gradient(critic_loss, learner.target_critic.trainable_variables)[0] is not None  # (the check has teeth)
    for got, want in zip(list(critic_grads) + list(policy_grads), want_critic + want_policy):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_one_step_moves_the_weights_and_polyak_averages_the_targets():
    tau = 0.1
    learner = make_learner(small_config(tau=tau), [random_batch(8)], steps_per_call=1)
    _perturb_targets(learner)
    before = [[v.numpy() for v in net.variables] for net in networks(learner)]
    metrics = learner.step()
    assert learner.num_steps == 1 and metrics["learner_steps"] == 1.0
    after = [[v.numpy() for v in net.variables] for net in networks(learner)]
    for net_before, net_after in zip(before[:2], after[:2]):  # the online networks moved
        assert any(not np.allclose(b, a) for b, a in zip(net_before, net_after))
    for online, target_before, target_after in zip(after[:2], before[2:], after[2:]):
        for w, t0, t1 in zip(online, target_before, target_after):
            np.testing.assert_allclose(t1, (1 - tau) * t0 + tau * w, rtol=1e-5, atol=1e-6)
    assert np.isfinite(metrics["critic_loss"]) and np.isfinite(metrics["mean_q"])


@pytest.mark.slow
def test_two_replicas_match_one_replica():
    # Clipping at norm 0.05 is active (checked below), so the all-reduce must come before it for the runs to agree.
    config = small_config(max_gradient_norm=0.05)
    batches = [random_batch(8, seed=s) for s in range(4)]
    one, two = make_learner(config, batches, 1, steps_per_call=3), make_learner(config, batches, 2, steps_per_call=3)
    copy_weights(one, two)
    initial = all_weights(one)
    m1 = [one.step() for _ in range(2)]
    m2 = [two.step() for _ in range(2)]
    assert one.num_steps == two.num_steps == 6
    assert m1[0]["critic_grad_norm"] > 0.05
    for a, b in zip(all_weights(one), all_weights(two)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m1[-1]["critic_loss"], m2[-1]["critic_loss"], rtol=1e-5)
    assert all(not np.allclose(a, b) for a, b in zip(all_weights(one), initial))  # every variable moved


def test_nan_reward_raises_a_clear_error_and_applies_nothing():
    bad = random_batch(8)
    bad.reward[3] = np.nan
    learner = make_learner(small_config(), [bad], steps_per_call=2)
    before = all_weights(learner)
    with pytest.raises(FloatingPointError, match=r"DDPG: non-finite critic loss .*at learner step 1; .*"
                                                 r"lower --critic-learning-rate or check the rewards"):
        learner.step()
    assert learner.num_steps == 0
    for a, b in zip(before, all_weights(learner)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_checkpoint_restores_everything_and_continues_identically(tmp_path):
    config = small_config()
    batches = [random_batch(8, seed=s) for s in range(3)]
    a = make_learner(config, batches, steps_per_call=3)
    a.step()
    path = tf.train.Checkpoint(**a.checkpointables()).save(str(tmp_path / "ckpt"))
    b = make_learner(config, batches, steps_per_call=3)
    tf.train.Checkpoint(**b.checkpointables()).restore(path).assert_existing_objects_matched()
    assert b.num_steps == 3 and int(b.critic_optimizer.iterations) == int(b.policy_optimizer.iterations) == 3
    ma, mb = a.step(), b.step()  # both iterators are at batch 0 (mod 3)
    np.testing.assert_allclose(ma["critic_loss"], mb["critic_loss"], rtol=1e-5)
    for x, y in zip(all_weights(a), all_weights(b)):
        np.testing.assert_allclose(x, y, atol=1e-6)
