"""What population-based training may change, and how: plain Python, no Ray (the CLI checks it before Ray).

A ``Mutation`` is one config field's space: a numeric range (searched on a
log scale when it spans a decade or more of positive values) or a list of
values. PBT's explore step perturbs a value within that space: with
``resample_probability`` a fresh draw, else a step of x0.8 or x1.2 clamped to
the range (a list: one place left or right).
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any, Tuple, Union

LINEAGE = "lineage.jsonl"  # in the sweep directory: one line per exploit


@dataclasses.dataclass(frozen=True)
class Mutation:
    """How PBT may change one config field: a range ``low``..``high`` or a list of ``values``."""

    field: str
    low: Union[int, float, None] = None
    high: Union[int, float, None] = None
    values: Tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.values:
            if self.low is not None or self.high is not None:
                raise ValueError(f"mutation of {self.field}: give a range or values, not both")
        elif self.low is None or self.high is None or not self.low < self.high:
            raise ValueError(f"mutation of {self.field}: the range needs low < high (got {self.low}, {self.high})")

    @property
    def is_int(self) -> bool:
        return not self.values and isinstance(self.low, int) and isinstance(self.high, int)

    @property
    def log_scale(self) -> bool:
        """A range over a decade or more of positive values is searched on a log scale."""
        return not self.values and self.low > 0 and self.high / self.low >= 10

    def sample(self, rng: random.Random) -> Any:
        """A value drawn from the whole range (or list): a trial's starting value."""
        if self.values:
            return rng.choice(self.values)
        if self.is_int:
            return rng.randint(self.low, self.high)
        if self.log_scale:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)

    def perturb(self, value: Any, rng: random.Random, resample_probability: float) -> Any:
        """PBT's explore: resample, or scale by 0.8 or 1.2 (a list: a neighbour), within the range."""
        if rng.random() < resample_probability:
            return self.sample(rng)
        if self.values:
            index = self.values.index(value) if value in self.values else 0
            return self.values[min(len(self.values) - 1, max(0, index + rng.choice((-1, 1))))]
        scaled = value * rng.choice((0.8, 1.2))
        scaled = min(self.high, max(self.low, scaled))
        return int(round(scaled)) if self.is_int else scaled
