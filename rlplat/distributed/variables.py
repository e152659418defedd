"""A learner's Ray handle, seen by actors as a plain ``core.VariableSource``.

Actors and evaluators are written against ``core.VariableSource``; this
adapter hides Ray from them. Pulls are versioned: the actor sends the version
it already holds and the learner answers None when it has nothing newer, so
an actor polling faster than the learner steps moves no weights at all.
Every wait is bounded (``timeout_s``).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import ray

from rlplat import core


class LearnerUnavailableError(RuntimeError):
    """The learner did not serve weights (dead, or busy past the timeout)."""


class RemoteVariableSource(core.VariableSource):
    """``get_variables`` through ``handle.get_variables_if_newer.remote(...)``.

    Args:
      handle: a Ray actor handle of a ``LearnerWorker`` (anything with
        ``get_variables_if_newer(names, version) -> None | (version, weights)``),
        or the learner actor's NAME. Workers that Ray may restart get the name:
        a handle passed as a constructor argument is kept in the object store
        and Ray cannot promise it is still there at restart time.
      timeout_s: bound on one pull.
      first_timeout_s: bound on the first call (default ``timeout_s``); a
        worker started alongside the learner waits for its build here.
    """

    def __init__(self, handle, timeout_s: float = 60.0, first_timeout_s: Optional[float] = None):
        if isinstance(handle, str):
            handle = ray.get_actor(handle)
        self._handle = handle
        self._timeout_s = float(timeout_s)
        self._first_timeout_s = float(timeout_s if first_timeout_s is None else first_timeout_s)
        self._answered = False
        self._cache: Dict[Tuple[str, ...], Tuple[int, Dict[str, Sequence[np.ndarray]]]] = {}
        self.num_pulls = 0  # Pulls that moved weights (for stats).

    def get_variables(self, names: Sequence[str]) -> Tuple[int, Dict[str, Sequence[np.ndarray]]]:
        key = tuple(names)
        held_version = self._cache[key][0] if key in self._cache else -1
        fresh = self.call("get_variables_if_newer", list(names), held_version)
        if fresh is not None:
            self._cache[key] = fresh
            self.num_pulls += 1
        return self._cache[key]

    def call(self, method: str, *args):
        """``handle.<method>(*args)``, waited for at most ``timeout_s``."""
        ref = getattr(self._handle, method).remote(*args)
        timeout_s = self._timeout_s if self._answered else self._first_timeout_s
        try:
            result = ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError as e:
            raise LearnerUnavailableError(
                f"the learner did not answer {method} within {timeout_s:g}s; it is overloaded, "
                "stuck or still starting (see its log in the Ray session's logs/ directory)") from e
        except ray.exceptions.RayActorError as e:
            raise LearnerUnavailableError(
                "the learner is gone (its Ray actor died); the run cannot continue") from e
        self._answered = True
        return result
