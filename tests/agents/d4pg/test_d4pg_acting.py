"""D4PG actor: weights before the first action, greedy vs noisy actions, pulls, adder calls."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dm_env
import numpy as np
import pytest

from rlplat_agents.d4pg.networks import policy_template
from rlplat.gaussian_actor import GaussianActor
from rlplat import core
from rlplat.utils import numpy_layers

from d4pg_testlib import ACT, OBS, SPEC

LAYERS = (16, 16)


def _weights(template, scale=0.3, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(0, scale, a.shape).astype(np.float32)
            for op in template for a in numpy_layers.op_arrays(op)]


class FakeSource(core.VariableSource):
    """Serves fixed weights; version -1 (nothing yet) for the first `not_ready` calls."""

    def __init__(self, weights, not_ready=0):
        self.weights, self.version, self.not_ready, self.calls = weights, 0, not_ready, 0

    def get_variables(self, names):
        self.calls += 1
        if self.calls <= self.not_ready:
            return -1, {}
        return self.version, {"policy": self.weights}


class RecordingAdder:
    def __init__(self):
        self.calls = []

    def add_first(self, timestep):
        self.calls.append("first")

    def add(self, action, timestep):
        self.calls.append("add")


@pytest.fixture(scope="module")
def template():
    return policy_template(SPEC, LAYERS)


def _forward(template, weights, obs):
    params, i = [dict(op) for op in template], 0
    for op in params:
        keys = {"dense": ("w", "b"), "layer_norm": ("gamma", "beta")}.get(op["op"], ())
        for key in keys:
            op[key] = weights[i]
            i += 1
    return numpy_layers.forward(params, obs)[0]


def test_numpy_policy_matches_the_reference_forward(template):
    weights = _weights(template, scale=0.2)
    policy = numpy_layers.NumpyForward(template)
    policy.load(weights)
    obs = np.random.default_rng(1).normal(size=(20, OBS)).astype(np.float32)
    for o in obs:
        np.testing.assert_allclose(policy(o), _forward(template, weights, o), atol=1e-6)
    with pytest.raises(ValueError, match="different configs"):
        policy.load(weights[:-1])


def test_weights_are_loaded_before_the_first_action(template):
    source = FakeSource(_weights(template), not_ready=3)
    actor = GaussianActor(template, source, sigma=0.0, seed=0)
    assert actor.policy_version == -1
    actor.select_action(np.zeros(OBS, np.float32))
    assert actor.policy_version == 0 and source.calls == 4  # Waited through 3 "not yet".


def test_no_weights_times_out_with_a_clear_error(template):
    actor = GaussianActor(template, FakeSource(_weights(template), not_ready=10**9),
                             wait_timeout_s=0.2)
    with pytest.raises(TimeoutError, match="no policy weights"):
        actor.select_action(np.zeros(OBS, np.float32))


def test_greedy_actor_is_deterministic_and_noise_free(template):
    weights = _weights(template, scale=0.2)
    actor = GaussianActor(template, FakeSource(weights), sigma=0.5, seed=0, evaluation=True)
    obs = np.random.default_rng(2).normal(size=OBS).astype(np.float32)
    a1, a2 = actor.select_action(obs), actor.select_action(obs)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(a1, _forward(template, weights, obs), atol=1e-6)
    assert actor.sigma == 0.0


def test_exploration_noise_has_std_sigma(template):
    weights = _weights(template, scale=0.01)  # Policy output ~0: little clipping at sigma 0.2.
    actor = GaussianActor(template, FakeSource(weights), sigma=0.2, seed=3)
    obs = np.ones(OBS, np.float32)
    greedy = _forward(template, weights, obs)
    actions = np.stack([actor.select_action(obs) for _ in range(4000)])
    noise = actions - greedy
    assert actions.shape == (4000, ACT) and actions.dtype == np.float32
    np.testing.assert_allclose(noise.std(axis=0), 0.2, rtol=0.06)
    np.testing.assert_allclose(noise.mean(axis=0), 0.0, atol=0.015)


def test_actions_are_clipped_to_the_unit_box(template):
    actor = GaussianActor(template, FakeSource(_weights(template)), sigma=3.0, seed=4)
    actions = np.stack([actor.select_action(np.ones(OBS, np.float32)) for _ in range(500)])
    assert np.all(np.abs(actions) <= 1.0) and np.any(np.abs(actions) == 1.0)


def test_pulls_every_update_period_and_writes_through_the_adder(template):
    source = FakeSource(_weights(template))
    adder = RecordingAdder()
    actor = GaussianActor(template, source, adder, sigma=0.1, seed=0, variable_update_period=3)
    obs = np.zeros(OBS, np.float32)
    actor.observe_first(dm_env.restart(obs))
    action = actor.select_action(obs)
    pulls = source.calls
    source.version = 7  # The learner moved on.
    for i in range(3):
        actor.observe(action, dm_env.transition(1.0, obs))
        actor.update()
        assert actor.policy_version == (7 if i == 2 else 0)
    assert source.calls == pulls + 1
    assert adder.calls == ["first", "add", "add", "add"]
