"""V-trace against a slow NumPy reference, hand-worked numbers and episode ends."""

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat.losses.vtrace import vtrace
# pytest (prepend import mode) puts this folder on sys.path.
from vtrace_reference import n_step_returns, reference_vtrace

GAMMA = 0.9
SPEC = tf.TensorSpec([None, None], tf.float32)


def _graph_vtrace(rho_bar=1.0, c_bar=1.0):
    """vtrace under tf.function with unknown T and B (no static shapes to lean on)."""
    return tf.function(
        lambda v_tm1, v_t, r_t, d_t, log_rho, mask, end: vtrace(
            v_tm1, v_t, r_t, d_t, log_rho, mask_t=mask, episode_end_t=end,
            clip_rho_threshold=rho_bar, clip_c_threshold=c_bar, clip_pg_rho_threshold=rho_bar),
        input_signature=[SPEC] * 7,
    )


def _unroll(rng, T, B):
    """Contiguous values: v_tm1 = values[:-1], v_t = values[1:]."""
    values = rng.normal(size=(T + 1, B)).astype(np.float32)
    r_t = rng.normal(size=(T, B)).astype(np.float32)
    log_rho = rng.normal(0.0, 1.0, (T, B)).astype(np.float32)  # rho on both sides of 1
    return values[:-1], values[1:], r_t, np.full((T, B), GAMMA, np.float32), log_rho


@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (2.0, 0.5), (None, None)])
def test_matches_reference_eager_and_graph(rho_bar, c_bar):
    rng = np.random.default_rng(0)
    v_tm1, v_t, r_t, d_t, log_rho = _unroll(rng, 7, 3)
    d_t[2, 1] = 0.0  # a termination in one column
    want = reference_vtrace(v_tm1, v_t, r_t, d_t, log_rho, rho_bar=rho_bar, c_bar=c_bar,
                            pg_rho_bar=rho_bar)
    got = vtrace(v_tm1, v_t, r_t, d_t, log_rho, clip_rho_threshold=rho_bar,
                 clip_c_threshold=c_bar, clip_pg_rho_threshold=rho_bar)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5)
    ones, zeros = np.ones_like(r_t), np.zeros_like(r_t)
    graph = _graph_vtrace(rho_bar, c_bar)(v_tm1, v_t, r_t, d_t, log_rho, ones, zeros)
    for g, w in zip(graph, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5)


def test_reference_with_mask_and_episode_ends_under_tf_function():
    rng = np.random.default_rng(1)
    v_tm1, _, r_t, d_t, log_rho = _unroll(rng, 6, 4)
    v_t = rng.normal(size=(6, 4)).astype(np.float32)  # arbitrary successor values
    mask = np.ones((6, 4), np.float32)
    mask[3:, 0] = 0.0  # column 0: 3 real rows then padding
    end = np.zeros((6, 4), np.float32)
    end[1, 1] = end[4, 2] = 1.0  # episode switches inside columns 1 and 2
    want = reference_vtrace(v_tm1, v_t, r_t, d_t, log_rho, mask=mask, episode_end=end)
    got = _graph_vtrace()(v_tm1, v_t, r_t, d_t, log_rho, mask, end)
    np.testing.assert_allclose(got.vs.numpy(), want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want[1], rtol=1e-5, atol=1e-5)


def test_hand_worked_t2():
    # V(x0)=1, V(x1)=2, V(x2)=3 (bootstrap), r=(1, 2), gamma=.9, rho=(2, .5).
    # Clipped: rho=(1, .5), c=(1, .5).
    #   delta_0 = 1 * (1 + .9*2 - 1) = 1.8     delta_1 = .5 * (2 + .9*3 - 2) = 1.35
    #   v_1 = 2 + 1.35 = 3.35                  v_0 = 1 + 1.8 + .9*1*1.35 = 4.015
    #   pg_0 = 1 * (1 + .9*3.35 - 1) = 3.015   pg_1 = .5 * (2 + .9*3 - 2) = 1.35
    out = vtrace([[1.0], [2.0]], [[2.0], [3.0]], [[1.0], [2.0]], [[GAMMA], [GAMMA]],
                 [[math.log(2.0)], [math.log(0.5)]])
    np.testing.assert_allclose(out.vs.numpy()[:, 0], [4.015, 3.35], rtol=1e-6)
    np.testing.assert_allclose(out.pg_advantages.numpy()[:, 0], [3.015, 1.35], rtol=1e-6)


def test_on_policy_equals_n_step_returns():
    rng = np.random.default_rng(2)
    v_tm1, v_t, r_t, d_t, _ = _unroll(rng, 5, 2)
    out = vtrace(v_tm1, v_t, r_t, d_t, np.zeros_like(r_t))
    want = n_step_returns(r_t, d_t, v_t[-1])
    np.testing.assert_allclose(out.vs.numpy(), want, rtol=1e-5)
    # pg advantage = r + gamma * v_{s+1} - V(x_s), with v_T = V(x_T).
    vs_next = np.concatenate([want[1:], v_t[-1:]])
    np.testing.assert_allclose(out.pg_advantages.numpy(), r_t + GAMMA * vs_next - v_tm1,
                               rtol=1e-5, atol=1e-6)


def _two_episodes(rng, k=2, T=6):
    """Episode A is transitions 0..k, episode B starts at row k+1 (one column)."""
    v_tm1, v_t, r_t, d_t, _ = _unroll(rng, T, 1)
    return v_tm1, v_t, r_t, d_t, np.zeros((T, 1), np.float32)  # on-policy


def test_termination_mid_unroll_does_not_bootstrap():
    v_tm1, v_t, r_t, d_t, log_rho = _two_episodes(np.random.default_rng(3))
    d_t[2] = 0.0  # transition 2 terminates episode A
    vs = vtrace(v_tm1, v_t, r_t, d_t, log_rho).vs.numpy()
    np.testing.assert_allclose(vs[:3], n_step_returns(r_t[:3], d_t[:3], 0.0), rtol=1e-5)
    # Episode B: n-step returns from its own rows, bootstrapped at the end.
    np.testing.assert_allclose(vs[3:], n_step_returns(r_t[3:], d_t[3:], v_t[-1]), rtol=1e-5)


def test_truncation_mid_unroll_bootstraps_from_final_observation():
    rng = np.random.default_rng(4)
    v_tm1, v_t, r_t, d_t, log_rho = _two_episodes(rng)
    v_final = 7.5  # V(final observation of episode A), NOT V(x_3) of episode B
    v_t[2] = v_final
    end = np.zeros_like(r_t)
    end[2] = 1.0  # time limit: discount stays gamma
    out = vtrace(v_tm1, v_t, r_t, d_t, log_rho, episode_end_t=end)
    np.testing.assert_allclose(out.vs.numpy()[:3], n_step_returns(r_t[:3], d_t[:3], v_final),
                               rtol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy()[2], r_t[2] + GAMMA * v_final - v_tm1[2],
                               rtol=1e-5)
    # Without the end flag the trace would leak episode B in: the flag matters.
    leaky = vtrace(v_tm1, v_t, r_t, d_t, log_rho, episode_end_t=None).vs.numpy()
    assert not np.allclose(leaky[:3], out.vs.numpy()[:3])


@pytest.mark.parametrize("layout", ["episode_end", "mask"])
def test_next_episode_never_reaches_earlier_rows(layout):
    rng = np.random.default_rng(5)
    v_tm1, v_t, r_t, d_t, _ = _two_episodes(rng)
    log_rho = rng.normal(size=r_t.shape).astype(np.float32)  # off-policy too
    end, mask = np.zeros_like(r_t), np.ones_like(r_t)
    if layout == "episode_end":
        end[2] = 1.0
    else:
        mask[3:] = 0.0  # SequenceAdder: final obs at row 3, then padding

    def run(v_tm1, v_t, r_t, log_rho):
        out = vtrace(v_tm1, v_t, r_t, d_t, log_rho, mask_t=mask, episode_end_t=end)
        return out.vs.numpy(), out.pg_advantages.numpy()

    vs, pg = run(v_tm1, v_t, r_t, log_rho)
    # Rewrite everything that belongs to the next episode / the padding.
    v_tm1b, v_tb, r_tb, log_rhob = (x.copy() for x in (v_tm1, v_t, r_t, log_rho))
    v_tm1b[3:] += 100.0
    v_tb[3:] -= 50.0
    r_tb[3:] *= -20.0
    log_rhob[3:] += 30.0  # exp would overflow on padded rows if not neutralised
    vs2, pg2 = run(v_tm1b, v_tb, r_tb, log_rhob)
    np.testing.assert_array_equal(vs2[:3], vs[:3])
    np.testing.assert_array_equal(pg2[:3], pg[:3])
    if layout == "mask":  # padded rows: no correction and no advantage
        np.testing.assert_array_equal(vs2[3:], v_tm1b[3:])
        np.testing.assert_array_equal(pg2[3:], 0.0)
    assert np.isfinite(vs2).all() and np.isfinite(pg2).all()


def test_outputs_carry_no_gradient():
    v = tf.Variable([[1.0], [2.0]])
    with tf.GradientTape() as tape:
        out = vtrace(v, v + 1.0, [[1.0], [1.0]], [[GAMMA], [GAMMA]], [[0.0], [0.0]])
        total = tf.reduce_sum(out.vs) + tf.reduce_sum(out.pg_advantages)
    assert tape.gradient(total, v) is None


def test_bad_shapes_and_thresholds_fail_in_one_line():
    with pytest.raises(ValueError, match="r_t") as err:
        vtrace(np.zeros((3, 2)), np.zeros((3, 2)), np.zeros((2, 2)), np.zeros((3, 2)),
               np.zeros((3, 2)))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="clip_c_threshold"):
        vtrace(*[np.zeros((3, 2))] * 5, clip_c_threshold=0.0)


def test_lambda_decays_the_trace_like_the_reference():
    rng = np.random.default_rng(6)
    v_tm1, v_t, r_t, d_t, log_rho = _unroll(rng, 5, 2)
    want = reference_vtrace(v_tm1, v_t, r_t, d_t, log_rho, lam=0.8)
    got = vtrace(v_tm1, v_t, r_t, d_t, log_rho, lambda_=0.8)
    np.testing.assert_allclose(got.vs.numpy(), want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.pg_advantages.numpy(), want[1], rtol=1e-5, atol=1e-5)
