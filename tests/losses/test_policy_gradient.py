"""IMPALA loss pieces: closed forms, masking and gradient directions."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf
from scipy import special  # stats is imported in the tests that use it: ~1 s in every collecting process

from rlplat_agents.impala import losses
from rlplat.losses import policy_gradient as pg_losses
from rlplat.losses.vtrace import vtrace

T, B, A, D = 3, 2, 4, 2


def test_categorical_log_prob_and_entropy_closed_form():
    from scipy import stats
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (T, B, A)).astype(np.float32)
    actions = rng.integers(0, A, (T, B)).astype(np.float32)  # replay stores floats
    log_p = special.log_softmax(logits.astype(np.float64), axis=-1)
    want = np.take_along_axis(log_p, actions.astype(int)[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(pg_losses.categorical_log_prob(logits, actions), want, rtol=1e-5)
    np.testing.assert_allclose(pg_losses.categorical_entropy(logits),
                               stats.entropy(np.exp(log_p), axis=-1), rtol=1e-5)
    # Uniform logits: entropy log(A).
    np.testing.assert_allclose(pg_losses.categorical_entropy(np.zeros((1, 1, A))), [[np.log(A)]],
                               rtol=1e-6)


def test_gaussian_log_prob_and_entropy_closed_form():
    from scipy import stats
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(T, B, D)).astype(np.float32)
    log_std = rng.uniform(-1.5, 0.5, (T, B, D)).astype(np.float32)
    a = rng.normal(size=(T, B, D)).astype(np.float32)
    std = np.exp(log_std.astype(np.float64))
    want = stats.norm.logpdf(a, mean, std).sum(-1)
    np.testing.assert_allclose(pg_losses.gaussian_log_prob(mean, log_std, a), want, rtol=1e-5)
    np.testing.assert_allclose(pg_losses.gaussian_entropy(log_std),
                               stats.norm.entropy(mean, std).sum(-1), rtol=1e-5)
    graph = tf.function(pg_losses.gaussian_log_prob)(mean, log_std, a)
    np.testing.assert_allclose(graph, want, rtol=1e-5)


def _grad(fn, x):
    x = tf.Variable(np.asarray(x, np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(fn(x))
    return tape.gradient(loss, x).numpy()


def test_tanh_gaussian_log_prob_is_the_density_of_the_squashed_action():
    from scipy import stats
    rng = np.random.default_rng(2)
    mean = rng.normal(size=(T, B, D)).astype(np.float32)
    log_std = rng.uniform(-1.5, 0.5, (T, B, D)).astype(np.float32)
    u = rng.normal(0, 2, size=(T, B, D)).astype(np.float32)
    u[0, 0, 0] = 30.0  # far in tanh's tail: the stable form stays finite
    u64 = u.astype(np.float64)
    # Change of variables a = tanh(u): p(a) = N(u) / prod(1 - tanh(u)^2); the
    # log-Jacobian in float64 via log(1 - tanh^2) = log(4) - 2|u| - 2 log(1 + e^-2|u|).
    log_jac = (np.log(4.0) - 2 * np.abs(u64) - 2 * np.log1p(np.exp(-2 * np.abs(u64)))).sum(-1)
    want = stats.norm.logpdf(u64, mean, np.exp(log_std.astype(np.float64))).sum(-1) - log_jac
    got = pg_losses.tanh_gaussian_log_prob(mean, log_std, u).numpy()
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # It integrates to 1 over a in (-1, 1) (one dimension).
    a = np.linspace(-1 + 1e-7, 1 - 1e-7, 400_001)
    logp = pg_losses.tanh_gaussian_log_prob(np.full((1, a.size, 1), 0.7, np.float32),
                                         np.full((1, a.size, 1), -0.3, np.float32),
                                         np.arctanh(a)[None, :, None].astype(np.float32))
    np.testing.assert_allclose(np.trapz(np.exp(logp.numpy()[0]), a), 1.0, atol=2e-3)


def test_tanh_gaussian_entropy_estimate_is_unbiased_and_penalises_the_bounds():
    from scipy import stats
    n = 200_000
    noise = np.random.default_rng(3).normal(size=(1, n, 1)).astype(np.float32)

    def estimate(mean, log_std):
        shape = (1, n, 1)
        return float(np.mean(pg_losses.tanh_gaussian_entropy(
            np.full(shape, mean, np.float32), np.full(shape, log_std, np.float32), noise)))

    def exact(mean, log_std):  # -E[log p(a)] by quadrature over a
        a = np.linspace(-1 + 1e-9, 1 - 1e-9, 400_001)
        u = np.arctanh(a)
        log_p = stats.norm.logpdf(u, mean, np.exp(log_std)) - np.log1p(-a * a)
        p = np.exp(log_p)
        return -np.trapz(p * log_p, a)

    for mean, log_std in [(0.0, -0.5), (0.8, -1.0), (2.0, 0.0)]:
        np.testing.assert_allclose(estimate(mean, log_std), exact(mean, log_std), atol=0.01)
    # Unlike the Gaussian's own entropy, moving the mean into tanh's flat tail
    # (the action stuck at a bound) or widening the std past ~1 LOWERS it.
    assert estimate(3.0, -0.5) < estimate(0.0, -0.5) - 1.0
    assert estimate(0.0, 1.0) < estimate(0.0, 0.0)


def test_gradient_signs():
    logits = np.zeros((1, 1, A), np.float32)
    action = np.array([[2.0]], np.float32)
    pg = lambda adv: lambda x: pg_losses.policy_gradient_loss(  # noqa: E731
        pg_losses.categorical_log_prob(x, action), adv)
    # Descending the loss raises log pi(a) for a positive advantage, lowers it
    # for a negative one.
    assert _grad(pg([[2.0]]), logits)[0, 0, 2] < 0
    assert _grad(pg([[-2.0]]), logits)[0, 0, 2] > 0
    # Baseline: v below its target -> gradient descent pushes v up.
    assert _grad(lambda v: pg_losses.baseline_loss([[3.0]], v), [[1.0]])[0, 0] < 0
    assert _grad(lambda v: pg_losses.baseline_loss([[-3.0]], v), [[1.0]])[0, 0] > 0
    # Entropy bonus: descending it widens the Gaussian and flattens the softmax.
    g = _grad(lambda s: pg_losses.entropy_loss(pg_losses.gaussian_entropy(s)), np.zeros((1, 1, D)))
    assert (g < 0).all()
    peaked = np.array([[[3.0, 0.0, 0.0, 0.0]]], np.float32)
    g = _grad(lambda x: pg_losses.entropy_loss(pg_losses.categorical_entropy(x)), peaked)
    assert g[0, 0, 0] > 0 and (g[0, 0, 1:] < 0).all()


def test_targets_receive_no_gradient():
    adv, vs = tf.Variable([[1.0]]), tf.Variable([[2.0]])
    with tf.GradientTape(persistent=True) as tape:
        pg_loss = pg_losses.policy_gradient_loss(tf.constant([[-0.5]]), adv)
        bl_loss = pg_losses.baseline_loss(vs, tf.constant([[0.0]]))
    assert tape.gradient(pg_loss, adv) is None and tape.gradient(bl_loss, vs) is None


def _batch(rng, continuous=False):
    mask = np.ones((T, B), np.float32)
    mask[2, 0] = 0.0  # one padded step
    return dict(
        log_pi_tm1=rng.normal(-1, 0.3, (T, B)).astype(np.float32),
        entropy_tm1=rng.uniform(0.5, 1.5, (T, B)).astype(np.float32),
        behaviour_log_pi_tm1=rng.normal(-1, 0.3, (T, B)).astype(np.float32),
        v_tm1=rng.normal(size=(T, B)).astype(np.float32),
        v_t=rng.normal(size=(T, B)).astype(np.float32),
        r_t=rng.normal(size=(T, B)).astype(np.float32),
        discount_t=np.full((T, B), 0.9, np.float32),
        mask_t=mask,
    )


def test_impala_loss_combines_masked_means():
    batch = _batch(np.random.default_rng(2))
    total, parts = losses.impala_loss(**batch)
    m = batch["mask_t"]
    ret = vtrace(batch["v_tm1"], batch["v_t"], batch["r_t"], batch["discount_t"],
                 batch["log_pi_tm1"] - batch["behaviour_log_pi_tm1"], mask_t=m)
    mean = lambda x: (x * m).sum() / m.sum()  # noqa: E731
    want_pg = mean(-batch["log_pi_tm1"] * ret.pg_advantages.numpy())
    want_bl = mean(0.5 * (ret.vs.numpy() - batch["v_tm1"]) ** 2)
    want_ent = mean(-batch["entropy_tm1"])
    np.testing.assert_allclose(parts["policy_gradient_loss"], want_pg, rtol=1e-5)
    np.testing.assert_allclose(parts["baseline_loss"], want_bl, rtol=1e-5)
    np.testing.assert_allclose(parts["entropy_loss"], want_ent, rtol=1e-5)
    np.testing.assert_allclose(total, want_pg + 0.5 * want_bl + 0.01 * want_ent, rtol=1e-5)
    graph_total, _ = tf.function(losses.impala_loss)(**batch)
    np.testing.assert_allclose(graph_total, total, rtol=1e-6)


def test_masked_steps_contribute_nothing():
    rng = np.random.default_rng(3)
    batch = _batch(rng)
    total, _ = losses.impala_loss(**batch)
    changed = {k: v.copy() for k, v in batch.items()}
    for key in ("log_pi_tm1", "entropy_tm1", "behaviour_log_pi_tm1", "v_tm1", "r_t"):
        changed[key][2, 0] = 1e3 if key != "behaviour_log_pi_tm1" else -1e3  # huge rho
    changed["v_t"][2, 0] = np.inf  # even a non-finite padded value stays out
    total2, _ = losses.impala_loss(**changed)
    np.testing.assert_allclose(total2, total, rtol=1e-6)
    # ...and receives exactly zero gradient.
    v, log_pi, ent = (tf.Variable(batch[k]) for k in ("v_tm1", "log_pi_tm1", "entropy_tm1"))
    with tf.GradientTape() as tape:
        loss, _ = losses.impala_loss(**{**batch, "v_tm1": v, "log_pi_tm1": log_pi,
                                        "entropy_tm1": ent})
    for g in tape.gradient(loss, [v, log_pi, ent]):
        assert g.numpy()[2, 0] == 0.0 and np.count_nonzero(g.numpy()) == T * B - 1


def test_baseline_gradient_only_through_the_baseline_term():
    batch = _batch(np.random.default_rng(4))
    v = tf.Variable(batch["v_tm1"])
    with tf.GradientTape() as tape:
        loss, _ = losses.impala_loss(**{**batch, "v_tm1": v}, baseline_cost=0.5)
    ret = vtrace(batch["v_tm1"], batch["v_t"], batch["r_t"], batch["discount_t"],
                 batch["log_pi_tm1"] - batch["behaviour_log_pi_tm1"], mask_t=batch["mask_t"])
    m = batch["mask_t"]
    want = 0.5 * (batch["v_tm1"] - ret.vs.numpy()) * m / m.sum()
    np.testing.assert_allclose(tape.gradient(loss, v), want, rtol=1e-5, atol=1e-7)


def test_negative_costs_are_rejected():
    with pytest.raises(ValueError, match="entropy_cost"):
        losses.impala_loss(**_batch(np.random.default_rng(5)), entropy_cost=-0.1)
