"""Does scale change learning? Two groups of runs compared by their curves against env steps.

Pure logic (NumPy) under ``rlplat scale-check``. Each run's learning curve
(evaluation return against env steps) is interpolated onto one grid of env
steps that every run covers, and summarised by its normalised area under the
curve: the mean return over that grid. Two configurations (say 1 and 4 actors
at the same samples-per-insert) then differ by the difference of their mean
areas, ``b - a``. A percentile bootstrap over seeds, resampling each group's
runs with replacement, gives its confidence interval.

The verdict is an equivalence test, not a significance test: "equivalent"
needs the whole interval inside ``±margin`` (a fraction of group a's mean
area), so a few noisy seeds cannot pass by failing to show a difference.
An interval wholly outside the margin is "different"; anything else is
"inconclusive" (more seeds would decide).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Sequence

import numpy as np

EQUIVALENT, DIFFERENT, INCONCLUSIVE = "equivalent", "different", "inconclusive"
DEFAULT_MARGIN = 0.1
DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.9


class ScaleCheckError(ValueError):
    """Curves that cannot be compared; the message names the fix."""


def common_grid(curves: Sequence[np.ndarray], num_points: int = 100) -> np.ndarray:
    """Env steps every curve covers: from 0 (or the latest first evaluation) to the earliest last one.

    A run whose first evaluation comes after step 0 starts the grid there, so
    no run's curve is extrapolated.
    """
    curves = list(curves)
    if not curves or any(len(c) == 0 for c in curves):
        raise ScaleCheckError("a run has no evaluation yet; let every run evaluate at least twice")
    low = max(0.0, max(float(c[0, 0]) for c in curves))
    high = min(float(c[-1, 0]) for c in curves)
    if not high > low:
        raise ScaleCheckError(f"the runs' evaluations do not span a common range of env steps "
                              f"(from {low:g} to {high:g}); run them longer, to the same budget")
    return np.linspace(low, high, num_points)


def area(curve: np.ndarray, grid: np.ndarray) -> float:
    """Mean of ``curve`` (``[[env_steps, return], ...]``, sorted) over ``grid``, linearly interpolated."""
    return float(np.mean(np.interp(grid, curve[:, 0], curve[:, 1])))


def bootstrap_difference(a: Sequence[float], b: Sequence[float], *, num_resamples: int = DEFAULT_RESAMPLES,
                         confidence: float = DEFAULT_CONFIDENCE, seed: int = 0) -> tuple:
    """``(mean(b) - mean(a), low, high)``: a percentile bootstrap interval over each group's runs.

    Each resample draws ``len(a)`` of a's values and ``len(b)`` of b's with
    replacement, independently; a fixed ``seed`` makes the interval repeatable.
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.size < 1 or b.size < 1:
        raise ScaleCheckError("each group needs at least one run")
    if not 0.0 < confidence < 1.0:
        raise ScaleCheckError(f"confidence must be in (0, 1) (got {confidence})")
    rng = np.random.default_rng(seed)
    means_a = a[rng.integers(0, a.size, (num_resamples, a.size))].mean(axis=1)
    means_b = b[rng.integers(0, b.size, (num_resamples, b.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means_b - means_a, [tail, 1.0 - tail])
    return float(b.mean() - a.mean()), float(low), float(high)


def verdict(low: float, high: float, margin: float) -> str:
    """``equivalent`` when [low, high] lies within ±margin, ``different`` when wholly outside it."""
    if -margin <= low and high <= margin:
        return EQUIVALENT
    if low > margin or high < -margin:
        return DIFFERENT
    return INCONCLUSIVE


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two groups' areas under their curves, the difference b - a with its interval, and the verdict."""

    label_a: str
    label_b: str
    areas_a: tuple
    areas_b: tuple
    env_steps: tuple  # (first, last) of the common grid
    difference: float
    low: float
    high: float
    margin: float  # in return units: margin_fraction x mean area of a
    margin_fraction: float
    confidence: float
    verdict: str

    def describe(self) -> str:
        """One line a researcher reads: the verdict and the numbers behind it."""
        mean_a, mean_b = float(np.mean(self.areas_a)), float(np.mean(self.areas_b))
        first, last = self.env_steps
        return (f"{self.verdict}: mean return over env steps {first:,.0f}..{last:,.0f} is {mean_a:.1f} at "
                f"{self.label_a} ({len(self.areas_a)} runs) and {mean_b:.1f} at {self.label_b} "
                f"({len(self.areas_b)} runs); difference {self.difference:+.1f}, "
                f"{self.confidence:.0%} bootstrap interval [{self.low:+.1f}, {self.high:+.1f}] against a "
                f"margin of ±{self.margin:.1f} ({self.margin_fraction:.0%} of {self.label_a}'s)")

    def to_dict(self) -> Dict:
        return dataclasses.asdict(self)


def compare(curves_a: Sequence[np.ndarray], curves_b: Sequence[np.ndarray], *, label_a: str = "a",
            label_b: str = "b", margin: float = DEFAULT_MARGIN, confidence: float = DEFAULT_CONFIDENCE,
            num_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> Comparison:
    """Compares two groups of learning curves (each ``[[env_steps, return], ...]``) on one grid.

    Args:
      margin: the equivalence margin, a fraction of group a's mean area.
    """
    if not 0.0 < margin < 1.0:
        raise ScaleCheckError(f"margin must be a fraction in (0, 1) of the baseline's area (got {margin})")
    grid = common_grid([*curves_a, *curves_b])
    areas_a = tuple(area(c, grid) for c in curves_a)
    areas_b = tuple(area(c, grid) for c in curves_b)
    difference, low, high = bootstrap_difference(areas_a, areas_b, num_resamples=num_resamples,
                                                 confidence=confidence, seed=seed)
    scale = abs(float(np.mean(areas_a)))
    if scale == 0.0:
        raise ScaleCheckError(f"{label_a}'s curves are zero throughout; the margin needs a baseline that "
                              "scores something")
    margin_abs = margin * scale
    return Comparison(label_a=label_a, label_b=label_b, areas_a=areas_a, areas_b=areas_b,
                      env_steps=(float(grid[0]), float(grid[-1])), difference=difference, low=low,
                      high=high, margin=margin_abs, margin_fraction=margin, confidence=confidence,
                      verdict=verdict(low, high, margin_abs))
