"""IMPALA actor: sampling matches the policy, recorded log-probs and versions, greedy eval."""

import numpy as np
import pytest
import tensorflow as tf

import dm_env

from rlplat_agents.impala import acting, networks
from rlplat.losses import policy_gradient as pg_losses
from impala_testlib import CONTINUOUS_SPEC, DISCRETE_SPEC, OBS, small_config


class _Source:
    """A VariableSource serving one network's acting weights at a settable version."""

    def __init__(self, net, version=7):
        self.net, self.version = net, version

    def get_variables(self, names):
        return self.version, {"policy": [v.numpy() for v in networks.acting_variables(self.net)]}


class _RecordingAdder:
    def __init__(self):
        self.firsts, self.steps = [], []

    def add_first(self, timestep):
        self.firsts.append(timestep)

    def add(self, action, next_timestep, *, extras, behaviour_log_prob, policy_version):
        self.steps.append((action, extras, behaviour_log_prob, policy_version))


def _actor(spec, config, net=None, evaluation=False, seed=0):
    net = net or networks.make_network(spec, config)
    adder = _RecordingAdder()
    actor = acting.IMPALAActor(acting.make_numpy_policy(spec, config), spec.actions, _Source(net),
                               None if evaluation else adder, seed=seed, evaluation=evaluation,
                               variable_update_period=1000, squash=config.squash,
                               log_std_bounds=(config.min_log_std, config.max_log_std))
    return actor, adder, net


def _big_logits(net, scale=1.0):
    # Make the policy head output a fixed, clearly non-uniform distribution.
    net.policy_head.kernel.assign(tf.zeros_like(net.policy_head.kernel))
    bias = np.array([0.0, 1.0, -1.0], np.float32)[:net.policy_head.bias.shape[0]] * scale
    net.policy_head.bias.assign(bias)
    return bias


@pytest.mark.slow
def test_categorical_samples_follow_softmax_and_log_probs_are_exact():
    config = small_config()
    actor, adder, net = _actor(DISCRETE_SPEC, config)
    logits = _big_logits(net)
    obs = np.ones(OBS, np.float32)
    actor.observe_first(dm_env.restart(obs))
    n = 6000
    for _ in range(n):
        action = actor.select_action(obs)
        actor.observe(action, dm_env.transition(1.0, obs))
    probs = np.exp(logits) / np.exp(logits).sum()
    counts = np.bincount([int(s[0]) for s in adder.steps], minlength=3) / n
    np.testing.assert_allclose(counts, probs, atol=0.02)  # ~3.5 sigma at n=6000
    for action, extras, log_prob, version in adder.steps[:20]:
        np.testing.assert_allclose(log_prob, np.log(probs[int(action)]), rtol=1e-5)
        np.testing.assert_allclose(extras["logits"], logits, atol=1e-6)
        assert version == 7 and action.dtype == np.float32


def _gaussian_steps(squash, n=50):
    config = small_config(squash=squash)
    actor, adder, net = _actor(CONTINUOUS_SPEC, config)
    net.policy_head.bias.assign([2.0, 0.0, 0.5, -1.0])  # mean (2, 0); raw log-std (0.5, -1)
    obs = np.zeros(OBS, np.float32)
    actor.observe_first(dm_env.restart(obs))
    env_actions = []
    for _ in range(n):
        env_actions.append(actor.select_action(obs))
        actor.observe(env_actions[-1], dm_env.transition(0.0, obs))
    sampled = np.stack([s[0] for s in adder.steps])
    mean = np.stack([s[1]["mean"] for s in adder.steps])
    log_std = np.stack([s[1]["log_std"] for s in adder.steps])
    np.testing.assert_allclose(log_std[0], networks.squash_log_std(
        np.array([0.5, -1.0]), config.min_log_std, config.max_log_std), rtol=1e-5)
    return np.stack(env_actions), sampled, mean, log_std, [s[2] for s in adder.steps]


def test_clipped_gaussian_log_prob_matches_the_learner_formula_and_env_action_is_clipped():
    env_actions, sampled, mean, log_std, log_probs = _gaussian_steps("clip")
    assert np.all(np.abs(env_actions) <= 1.0)
    np.testing.assert_array_equal(env_actions, np.clip(sampled, -1.0, 1.0))
    assert np.any(np.abs(sampled) > 1.0)  # replay keeps the unclipped sample
    expected = pg_losses.gaussian_log_prob(mean, log_std, sampled).numpy()
    np.testing.assert_allclose(log_probs, expected, rtol=1e-4)


def test_tanh_gaussian_env_action_is_tanh_of_the_recorded_sample_with_its_log_prob():
    env_actions, sampled, mean, log_std, log_probs = _gaussian_steps("tanh")
    np.testing.assert_allclose(env_actions, np.tanh(sampled), rtol=1e-6)
    assert np.all(np.abs(env_actions) < 1.0) and np.any(np.abs(sampled) > 1.0)
    # The log-density of the squashed action, as the learner computes it.
    expected = pg_losses.tanh_gaussian_log_prob(mean, log_std, sampled).numpy()
    np.testing.assert_allclose(log_probs, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", [DISCRETE_SPEC, CONTINUOUS_SPEC])
def test_evaluation_is_greedy_and_records_nothing(spec):
    config = small_config()
    actor, adder, net = _actor(spec, config, evaluation=True)
    if spec is DISCRETE_SPEC:
        _big_logits(net)
        assert {int(actor.select_action(np.ones(OBS, np.float32))) for _ in range(50)} == {1}
    else:  # tanh of the mean (the default squash)
        net.policy_head.bias.assign([0.3, -0.2, 0.0, 0.0])
        np.testing.assert_allclose(actor.select_action(np.zeros(OBS, np.float32)),
                                   np.tanh([0.3, -0.2]), atol=1e-6)
    assert adder.steps == [] and actor.policy_version == 7


def test_lstm_actor_records_the_state_each_step_started_from():
    config = small_config(core="lstm")
    actor, adder, net = _actor(DISCRETE_SPEC, config)
    policy = networks.numpy_policy_of(net)
    rng = np.random.default_rng(1)
    observations = rng.normal(size=(4, OBS)).astype(np.float32)
    actor.observe_first(dm_env.restart(observations[0]))
    state = policy.initial_state()
    for t in range(3):
        actor.observe(actor.select_action(observations[t]), dm_env.transition(0.0, observations[t + 1]))
        np.testing.assert_allclose(adder.steps[t][1]["core_state"], state, atol=1e-6)
        _, state = policy(observations[t], state)
    # A new episode starts from the zero state again.
    actor.observe_first(dm_env.restart(observations[0]))
    actor.observe(actor.select_action(observations[0]), dm_env.transition(0.0, observations[1]))
    np.testing.assert_array_equal(adder.steps[-1][1]["core_state"], 0.0)
