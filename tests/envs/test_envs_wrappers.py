"""Unit tests for envs.wrappers: hand-checked numbers on a scripted env and on
real suite bounds/specs. The dm_env contract tests live in test_envs_contract.py."""

from __future__ import annotations

import collections

import dm_env
import numpy as np
import pytest
from dm_env import specs

import rlplat_envs as envs  # noqa: F401  (sets MUJOCO_GL before dm_control is imported)
from dm_control import suite as dm_suite

from rlplat_envs import (
    ActionRepeatWrapper,
    CanonicalActionWrapper,
    EnvironmentWrapper,
    Float32Wrapper,
    FlattenObservationWrapper,
    StepLimitWrapper,
)

MID, LAST = dm_env.StepType.MID, dm_env.StepType.LAST


# ---------------------------------------------------------------------------
# ActionRepeatWrapper


def test_action_repeat_sums_rewards_and_multiplies_discounts(scripted_env):
    inner = scripted_env(rewards=[1, 2, 3, 4, 5, 6, 7],
                         discounts=[1.0, 0.5, 1.0, 0.25, 1.0, 1.0, 0.0])
    env = ActionRepeatWrapper(inner, 3)
    assert env.reset().first()

    ts = env.step(np.zeros(1))
    assert (ts.step_type, ts.reward, ts.discount) == (MID, 1 + 2 + 3, 1.0 * 0.5 * 1.0)
    ts = env.step(np.zeros(1))
    assert (ts.step_type, ts.reward, ts.discount) == (MID, 4 + 5 + 6, 0.25 * 1.0 * 1.0)
    # Only one inner step is left: the repeat must stop at LAST, not run past it.
    ts = env.step(np.zeros(1))
    assert (ts.step_type, ts.reward, ts.discount) == (LAST, 7, 0.0)
    assert len(inner.actions) == 7
    np.testing.assert_array_equal(ts.observation, [7, 7])

    # The step after LAST resets, consuming exactly one inner call.
    resets = inner.num_resets
    assert env.step(np.zeros(1)).first()
    assert inner.num_resets == resets + 1 and len(inner.actions) == 7


def test_action_repeat_on_fresh_env_returns_first_once(scripted_env):
    inner = scripted_env(rewards=[1.0] * 5)
    env = ActionRepeatWrapper(inner, 4)
    assert env.step(np.zeros(1)).first()
    assert inner.num_resets == 1 and inner.actions == []


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-2, ValueError),
                                      (1.5, TypeError), (True, TypeError)])
def test_action_repeat_rejects_bad_counts(scripted_env, bad, exc):
    with pytest.raises(exc, match="num_repeats"):
        ActionRepeatWrapper(scripted_env(rewards=[1.0]), bad)


# ---------------------------------------------------------------------------
# StepLimitWrapper


def test_step_limit_truncates_with_discount_one(scripted_env):
    inner = scripted_env(rewards=[0.5] * 10)
    env = StepLimitWrapper(inner, 3)
    assert env.reset().first()
    for _ in range(2):  # twice: the counter must restart with each episode
        types = [env.step(np.zeros(1)) for _ in range(3)]
        assert [t.step_type for t in types] == [MID, MID, LAST]
        assert types[-1].discount == 1.0 and types[-1].reward == 0.5
        resets = inner.num_resets
        # The inner env is mid-episode; the wrapper must reset it itself.
        assert env.step(np.zeros(1)).first()
        assert inner.num_resets == resets + 1


def test_step_limit_keeps_termination_discount(scripted_env):
    inner = scripted_env(rewards=[1.0, 2.0], discounts=[1.0, 0.0])
    env = StepLimitWrapper(inner, 3)
    env.reset()
    assert env.step(np.zeros(1)).mid()
    ts = env.step(np.zeros(1))
    assert ts.last() and ts.discount == 0.0
    # Inner auto-reset, then a full limit-length episode must be allowed again.
    assert env.step(np.zeros(1)).first()
    assert env.step(np.zeros(1)).mid()


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (None, TypeError), (2.0, TypeError)])
def test_step_limit_rejects_bad_limits(scripted_env, bad, exc):
    with pytest.raises(exc, match="max_steps"):
        StepLimitWrapper(scripted_env(rewards=[1.0]), bad)


# ---------------------------------------------------------------------------
# Float32Wrapper


def test_float32_casts_floats_and_keeps_integers(scripted_env):
    obs_spec = collections.OrderedDict(
        pos=specs.BoundedArray((3,), np.float64, -2.0, 2.0, "pos"),
        pixels=specs.Array((2, 2), np.uint8, "pixels"))
    env = Float32Wrapper(scripted_env(rewards=[1.5, 2.5], observation_spec=obs_spec))
    spec = env.observation_spec()
    assert spec["pos"].dtype == np.float32 and spec["pixels"].dtype == np.uint8
    assert isinstance(spec["pos"], specs.BoundedArray) and spec["pos"].maximum == 2.0
    assert env.reward_spec().dtype == np.float32
    assert env.discount_spec().dtype == np.float32

    first = env.reset()
    assert first.reward is None and first.discount is None
    ts = env.step(np.zeros(1))
    assert ts.observation["pos"].dtype == np.float32
    assert ts.observation["pixels"].dtype == np.uint8
    assert ts.reward.dtype == np.float32 and ts.reward == np.float32(1.5)
    assert ts.discount.dtype == np.float32
    env.reward_spec().validate(ts.reward)
    env.discount_spec().validate(ts.discount)


# ---------------------------------------------------------------------------
# FlattenObservationWrapper


class ScriptedEnvWithValues(dm_env.Environment):
    """Returns fixed observation values; for checking exact flattening."""

    def __init__(self, values):
        self._values = values

    def reset(self):
        return dm_env.restart(self._values)

    def step(self, action):
        return dm_env.transition(0.0, self._values)

    def observation_spec(self):
        return collections.OrderedDict(
            (k, specs.Array(np.shape(v), np.asarray(v).dtype)) for k, v in self._values.items())

    def action_spec(self):
        return specs.Array((1,), np.float64)


def test_flatten_uses_sorted_key_order(scripted_env):
    # Spec order deliberately differs from sorted order.
    obs_spec = collections.OrderedDict(
        zeta=specs.Array((2,), np.float64), alpha=specs.Array((), np.float64),
        mid=specs.Array((2, 3), np.int32))
    env = FlattenObservationWrapper(scripted_env(rewards=[1.0], observation_spec=obs_spec))
    assert env.observation_spec().shape == (1 + 6 + 2,)
    assert env.observation_spec().dtype == np.float32
    assert env.layout == {"alpha": slice(0, 1), "mid": slice(1, 7), "zeta": slice(7, 9)}

    values = collections.OrderedDict(
        zeta=np.array([7.0, 8.0]), alpha=np.float64(-1.0),
        mid=np.arange(6, dtype=np.int32).reshape(2, 3))
    env = FlattenObservationWrapper(ScriptedEnvWithValues(values))
    flat = env.reset().observation
    np.testing.assert_array_equal(flat, [-1, 0, 1, 2, 3, 4, 5, 7, 8])
    assert flat.dtype == np.float32


def test_flatten_matches_real_walker_spec():
    raw = dm_suite.load("walker", "walk", task_kwargs={"random": 0})
    flat_env = FlattenObservationWrapper(dm_suite.load("walker", "walk", task_kwargs={"random": 0}))
    try:
        spec = raw.observation_spec()
        sizes = {k: int(np.prod(v.shape)) for k, v in spec.items()}
        assert sizes == {"orientations": 14, "height": 1, "velocity": 9}
        assert flat_env.observation_spec().shape == (sum(sizes.values()),)
        obs = raw.reset().observation
        expected = np.concatenate([np.ravel(obs[k]) for k in sorted(spec)]).astype(np.float32)
        np.testing.assert_array_equal(flat_env.reset().observation, expected)
    finally:
        raw.physics.free()
        flat_env.physics.free()


@pytest.mark.parametrize("obs_spec", [
    {},
    {"outer": {"inner": specs.Array((1,), np.float64)}},
    {"s": specs.Array((1,), np.str_)},
])
def test_flatten_rejects_unsupported_specs(scripted_env, obs_spec):
    with pytest.raises(TypeError):
        FlattenObservationWrapper(scripted_env(rewards=[1.0], observation_spec=obs_spec))


# ---------------------------------------------------------------------------
# CanonicalActionWrapper


def test_canonical_actions_on_quadruped_bounds():
    # quadruped has asymmetric, non-unit bounds, so a wrong formula shows.
    env = CanonicalActionWrapper(dm_suite.load("quadruped", "walk", task_kwargs={"random": 0}))
    try:
        inner = env.environment.action_spec()
        np.testing.assert_allclose(inner.minimum, [-1.0, -1.0, -0.8] * 4)
        np.testing.assert_allclose(inner.maximum, [1.0, 1.1, 0.8] * 4)
        spec = env.action_spec()
        assert isinstance(spec, specs.BoundedArray) and spec.dtype == np.float32
        assert spec.shape == (12,)
        np.testing.assert_array_equal(spec.minimum, -1.0)
        np.testing.assert_array_equal(spec.maximum, 1.0)

        env.reset()
        # min + (x + 1) / 2 * (max - min), by hand for x = -1, 0, 0.5:
        #   hip:   -1                            = -1
        #   knee:  -1 + 0.5 * 2.1                = 0.05
        #   ankle: -0.8 + 0.75 * 1.6             = 0.4
        env.step(np.array([-1.0, 0.0, 0.5] * 4, np.float32))
        np.testing.assert_allclose(env.physics.data.ctrl, [-1.0, 0.05, 0.4] * 4, atol=1e-6)
        # Out-of-range inputs clip to the bounds instead of extrapolating.
        env.step(np.array([-3.0, 2.0, 0.5] * 4, np.float32))
        np.testing.assert_allclose(env.physics.data.ctrl, [-1.0, 1.1, 0.4] * 4, atol=1e-6)
        with pytest.raises(ValueError, match="shape"):
            env.step(np.zeros(3))
    finally:
        env.physics.free()


@pytest.mark.parametrize("action_spec, exc", [
    (specs.Array((2,), np.float64), TypeError),
    (specs.BoundedArray((2,), np.int32, 0, 5), TypeError),
    (specs.BoundedArray((2,), np.float64, -np.inf, 1.0), ValueError),
])
def test_canonical_rejects_unusable_specs(scripted_env, action_spec, exc):
    with pytest.raises(exc):
        CanonicalActionWrapper(scripted_env(rewards=[1.0], action_spec=action_spec))


# ---------------------------------------------------------------------------
# Base wrapper


def test_base_wrapper_forwards_close_and_attributes(scripted_env):
    inner = scripted_env(rewards=[1.0])
    env = StepLimitWrapper(Float32Wrapper(EnvironmentWrapper(inner)), 5)
    assert env.num_resets == 0  # attribute lookup falls through the stack
    with env:
        pass
    assert inner.closed
    with pytest.raises(TypeError, match="dm_env.Environment"):
        EnvironmentWrapper(object())
