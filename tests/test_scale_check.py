"""The scale check's statistics: areas, the bootstrap interval and the verdict, against NumPy and by hand."""

import numpy as np
import pytest

from rlplat import scale_check


def _curve(xs, ys):
    return np.array(list(zip(xs, ys)), dtype=np.float64)


def test_area_is_the_mean_of_the_interpolated_curve_worked_by_hand():
    curve = _curve([0, 10, 20], [0.0, 100.0, 100.0])
    # grid 0, 5, 10, 15, 20 -> 0, 50, 100, 100, 100: mean 70.
    assert scale_check.area(curve, np.linspace(0, 20, 5)) == pytest.approx(70.0)


def test_common_grid_spans_what_every_curve_covers():
    a = _curve([0, 1000, 2000, 3000], [0, 1, 2, 3])
    b = _curve([500, 1500, 2500], [0, 1, 2])
    grid = scale_check.common_grid([a, b], num_points=11)
    assert grid[0] == 500 and grid[-1] == 2500 and len(grid) == 11
    with pytest.raises(scale_check.ScaleCheckError, match="run them longer"):
        scale_check.common_grid([_curve([0, 100], [0, 1]), _curve([200, 300], [0, 1])])
    with pytest.raises(scale_check.ScaleCheckError, match="no evaluation"):
        scale_check.common_grid([a, np.zeros((0, 2))])


def test_bootstrap_matches_a_plain_numpy_resampling_loop():
    a, b = [10.0, 12.0, 17.0], [11.0, 15.0, 20.0, 9.0]
    diff, low, high = scale_check.bootstrap_difference(a, b, num_resamples=2000, confidence=0.8, seed=7)
    rng = np.random.default_rng(7)
    idx_a = rng.integers(0, 3, (2000, 3))
    idx_b = rng.integers(0, 4, (2000, 4))
    ref = np.array([np.mean(np.take(b, ib)) - np.mean(np.take(a, ia)) for ia, ib in zip(idx_a, idx_b)])
    assert diff == pytest.approx(np.mean(b) - np.mean(a))
    assert low == pytest.approx(np.quantile(ref, 0.1)) and high == pytest.approx(np.quantile(ref, 0.9))
    # One run per group: no spread, the interval is the point.
    assert scale_check.bootstrap_difference([3.0], [5.0]) == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("low, high, margin, expected", [
    (-1.0, 1.0, 2.0, scale_check.EQUIVALENT),
    (-2.0, 2.0, 2.0, scale_check.EQUIVALENT),    # the margin itself is inside
    (-3.0, 1.0, 2.0, scale_check.INCONCLUSIVE),  # crosses -margin
    (1.0, 3.0, 2.0, scale_check.INCONCLUSIVE),
    (2.5, 4.0, 2.0, scale_check.DIFFERENT),
    (-9.0, -2.1, 2.0, scale_check.DIFFERENT),
])
def test_verdict_is_an_equivalence_test(low, high, margin, expected):
    assert scale_check.verdict(low, high, margin) == expected


def _seeds(scale, noise, n, rng):
    xs = np.arange(0, 100_001, 10_000)
    return [_curve(xs, scale * 800 * (1 - np.exp(-xs / 30_000)) + rng.normal(0, noise, xs.size)) for _ in range(n)]


def test_the_same_learning_is_equivalent_and_half_as_fast_is_different():
    rng = np.random.default_rng(0)
    same = scale_check.compare(_seeds(1.0, 10, 3, rng), _seeds(1.0, 10, 3, rng), label_a="1 actor",
                               label_b="4 actors")
    assert same.verdict == scale_check.EQUIVALENT, same.describe()
    slow = scale_check.compare(_seeds(1.0, 10, 3, rng), _seeds(0.5, 10, 3, rng))
    assert slow.verdict == scale_check.DIFFERENT and slow.high < -slow.margin, slow.describe()
    # Noisy seeds cannot pass by failing to show a difference.
    noisy = scale_check.compare(_seeds(1.0, 10, 3, rng), [c * [1, s] for c, s in
                                                          zip(_seeds(1.0, 10, 3, rng), (0.6, 1.0, 1.4))])
    assert noisy.verdict == scale_check.INCONCLUSIVE, noisy.describe()
    assert "equivalent" in same.describe() and "1 actor" in same.describe()


def test_compare_refuses_a_margin_that_is_not_a_fraction_and_a_zero_baseline():
    rng = np.random.default_rng(1)
    with pytest.raises(scale_check.ScaleCheckError, match="margin"):
        scale_check.compare(_seeds(1, 1, 2, rng), _seeds(1, 1, 2, rng), margin=5)
    zero = [_curve([0, 10], [0, 0])] * 2
    with pytest.raises(scale_check.ScaleCheckError, match="zero"):
        scale_check.compare(zero, zero)
