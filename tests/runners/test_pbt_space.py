"""PBT's search space: draws and perturbations stay in range and keep their type (pure Python)."""

import math
import random

import pytest

from rlplat.runners.pbt_space import Mutation


def test_a_range_perturbs_by_a_fifth_and_stays_inside():
    m = Mutation("sigma", low=0.1, high=0.5)
    rng = random.Random(0)
    seen = {round(m.perturb(0.3, rng, resample_probability=0.0), 9) for _ in range(50)}
    assert seen == {0.24, 0.36}
    assert m.perturb(0.5, random.Random(1), 0.0) in (0.4, 0.5)  # 0.6 is clamped to the top
    assert all(0.1 <= m.perturb(0.45, rng, 0.5) <= 0.5 for _ in range(200))


def test_integer_ranges_stay_integers_and_lists_step_to_a_neighbour():
    m = Mutation("target_update_period", low=10, high=200)
    rng = random.Random(0)
    values = [m.perturb(100, rng, 0.3) for _ in range(100)]
    assert all(isinstance(v, int) and 10 <= v <= 200 for v in values)
    listed = Mutation("n_step", values=(1, 3, 5, 10))
    steps = {listed.perturb(5, rng, 0.0) for _ in range(50)}
    assert steps == {3, 10}
    assert {listed.perturb(10, rng, 0.0) for _ in range(50)} == {5, 10}  # the end stays or steps in


def test_a_range_over_decades_is_drawn_on_a_log_scale():
    m = Mutation("critic_learning_rate", low=1e-5, high=1e-3)
    assert m.log_scale and not Mutation("sigma", low=0.1, high=0.5).log_scale
    rng = random.Random(3)
    draws = [m.sample(rng) for _ in range(4000)]
    # Uniform in log: half the draws fall below the geometric mean 1e-4, not ~1%.
    below = sum(d < 1e-4 for d in draws) / len(draws)
    assert 0.45 < below < 0.55
    assert all(1e-5 <= d <= 1e-3 for d in draws)
    assert math.isclose(min(draws), 1e-5, rel_tol=0.05)


def test_a_mutation_is_a_range_or_a_list_not_both_and_not_empty():
    with pytest.raises(ValueError, match="low < high"):
        Mutation("sigma", low=0.5, high=0.1)
    with pytest.raises(ValueError, match="not both"):
        Mutation("sigma", low=0.1, high=0.5, values=(0.2,))
