"""categorical_l2_project vs a loop-by-loop NumPy C51 reference and hand cases."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat.losses.distributional import categorical_l2_project
# pytest (prepend import mode) puts this folder on sys.path.
from categorical_reference import reference_project


def _random_case(seed, batch=6, n_src=9, n_dst=7, v_min=-3.0, v_max=5.0):
    rng = np.random.default_rng(seed)
    z_q = np.linspace(v_min, v_max, n_dst).astype(np.float32)
    width = v_max - v_min
    # Sources spill past both ends so clipping is exercised ...
    z_p = rng.uniform(v_min - 0.5 * width, v_max + 0.5 * width, (batch, n_src))
    # ... and some sit exactly on target atoms (the floor == ceil case).
    on_atom = rng.random((batch, n_src)) < 0.25
    z_p = np.where(on_atom, rng.choice(z_q, (batch, n_src)), z_p).astype(np.float32)
    probs = rng.dirichlet(np.ones(n_src), batch).astype(np.float32)
    return z_p, probs, z_q, v_min, v_max


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference_eager_and_in_tf_function(seed):
    z_p, probs, z_q, v_min, v_max = _random_case(seed)
    expected = reference_project(z_p, probs, v_min, v_max, len(z_q))
    eager = categorical_l2_project(z_p, probs, z_q).numpy()
    graph = tf.function(categorical_l2_project)(
        tf.constant(z_p), tf.constant(probs), tf.constant(z_q)).numpy()
    assert eager.shape == (z_p.shape[0], len(z_q))
    np.testing.assert_allclose(eager, expected, atol=1e-5)
    np.testing.assert_allclose(graph, expected, atol=1e-5)


def test_shared_support_rank1_matches_reference():
    _, probs, z_q, v_min, v_max = _random_case(3)
    z_p = np.linspace(-6.0, 9.0, probs.shape[1]).astype(np.float32)  # [N]
    got = categorical_l2_project(z_p, probs, z_q).numpy()
    np.testing.assert_allclose(got, reference_project(z_p, probs, v_min, v_max, len(z_q)),
                               atol=1e-5)


@pytest.mark.parametrize("seed", range(5))
def test_mass_is_conserved(seed):
    rng = np.random.default_rng(100 + seed)
    z_q = np.sort(rng.uniform(-10, 10, 13)).astype(np.float32)  # non-uniform too
    z_p = rng.normal(0, 15, (32, 21)).astype(np.float32)
    probs = rng.dirichlet(np.ones(21), 32).astype(np.float32)
    out = categorical_l2_project(z_p, probs, z_q).numpy()
    assert (out >= 0).all()
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, atol=1e-5)


SUPPORT = np.array([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32)


def _project_point(z, support=SUPPORT):
    return categorical_l2_project(np.array([[z]], np.float32),
                                  np.array([[1.0]], np.float32), support).numpy()[0]


def test_target_exactly_on_atom_keeps_all_mass_there():
    np.testing.assert_array_equal(_project_point(1.0), [0, 0, 0, 1, 0])
    np.testing.assert_array_equal(_project_point(-2.0), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(_project_point(2.0), [0, 0, 0, 0, 1])


def test_distribution_on_the_support_projects_to_itself():
    probs = np.array([[0.1, 0.2, 0.3, 0.15, 0.25]], np.float32)
    out = categorical_l2_project(SUPPORT, probs, SUPPORT).numpy()
    np.testing.assert_allclose(out, probs, atol=1e-7)


def test_targets_outside_support_clip_to_end_atoms():
    np.testing.assert_array_equal(_project_point(5.0), [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(_project_point(-7.0), [1, 0, 0, 0, 0])


def test_halfway_between_atoms_splits_evenly():
    np.testing.assert_allclose(_project_point(0.5), [0, 0, 0.5, 0.5, 0], atol=1e-7)
    np.testing.assert_allclose(_project_point(-1.75), [0.75, 0.25, 0, 0, 0], atol=1e-7)


def test_mixture_by_hand():
    # 0.2 at -0.25 -> 0.05 on -1, 0.15 on 0; 0.8 at 1.0 -> 0.8 on 1.
    out = categorical_l2_project(np.array([[-0.25, 1.0]], np.float32),
                                 np.array([[0.2, 0.8]], np.float32), SUPPORT).numpy()
    np.testing.assert_allclose(out, [[0, 0.05, 0.15, 0.8, 0]], atol=1e-7)


def test_non_uniform_support_uses_local_spacing():
    support = np.array([0.0, 1.0, 3.0], np.float32)
    np.testing.assert_allclose(_project_point(2.0, support), [0, 0.5, 0.5], atol=1e-7)
    np.testing.assert_allclose(_project_point(1.5, support), [0, 0.75, 0.25], atol=1e-7)
    np.testing.assert_allclose(_project_point(0.25, support), [0.75, 0.25, 0], atol=1e-7)
