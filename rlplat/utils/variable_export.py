"""Reading a learner's counters and weights without an eager TensorFlow op per read.

In TensorFlow 2.15 every eagerly executed op (a ``variable.numpy()`` is two:
a read and an identity) leaves a few dozen bytes behind for good. A learner
serves tens of weight pulls a second, each reading the step counter and, per
new version, every policy variable, so eager reads grow its memory without
bound (``bench/soak.py`` catches it; the figures are in docs/measurements.md). So:

- ``StepMirror`` keeps the step count in Python once the learner steps
  (it knows how many steps each call took) and reads the variable only
  until then, or after a failed call;
- ``VariableExport`` reads all the variables it serves in ONE compiled call
  per new version and hands out NumPy copies, cached per version.
"""

from __future__ import annotations

import threading
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf


class StepMirror:
    """The value of an int64 step-counter variable, tracked in Python between steps.

    Until the first ``set`` (e.g. while a checkpoint is restored into the
    variable) and after ``invalidate`` (a failed step whose count is
    uncertain), ``value`` reads the variable.
    """

    def __init__(self, counter: tf.Variable):
        self._counter = counter
        self._known: Optional[int] = None

    @property
    def value(self) -> int:
        known = self._known
        return known if known is not None else int(self._counter.numpy())

    def set(self, value: int) -> None:
        """Records the count after a call that is known to have taken its steps."""
        self._known = int(value)

    def invalidate(self) -> None:
        """Reads the variable again next time (after a call that failed part-way)."""
        self._known = None


class VariableExport:
    """NumPy copies of ``variables``, taken in one compiled read and cached per version.

    Thread-safe: weight pulls arrive on several threads while the learner
    steps on another; a step may run concurrently with a read (the copy is
    then a mix of two adjacent steps' values, as with per-variable reads).
    """

    def __init__(self, variables: Sequence[tf.Variable]):
        self._variables = list(variables)
        self._read = tf.function(lambda: [v.read_value() for v in self._variables], autograph=False)
        self._lock = threading.Lock()
        self._cached: Tuple[int, Optional[List[np.ndarray]]] = (-1, None)

    def get(self, version: int) -> List[np.ndarray]:
        """The variables' values as NumPy arrays, read at most once per ``version``."""
        with self._lock:
            if self._cached[0] != version or self._cached[1] is None:
                self._cached = (version, [np.array(t) for t in self._read()])
            return self._cached[1]
