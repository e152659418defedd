"""Named access to the dm_control suite: `make_environment("cartpole:swingup")`.

Names are "domain:task" strings. Every task in `dm_control.suite.ALL_TASKS` is
supported; unknown or malformed names raise `UnknownEnvironmentError` with a
one-line message suggesting the closest valid names.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import logging
import os
import sys
import threading
import types
from typing import Optional

import dm_env
import numpy as np

from rlplat_envs import gym_adapter
from rlplat_envs import wrappers
from rlplat_envs.base import UnknownEnvironmentError

__all__ = ["UnknownEnvironmentError", "list_tasks", "make_environment"]

_log = logging.getLogger(__name__)

# dm_control reports actuators without a ctrlrange as bounded by +-mjMAXVAL
# (1e10) instead of +-inf. Such bounds mean "unbounded", not a real range.
_UNBOUNDED_ACTION = 1e10

_LIST_HINT = "(run 'rlplat envs' to list all)"


def _all_tasks() -> tuple:
    """``dm_control.suite.ALL_TASKS``: (domain, task) pairs. Imports every domain."""
    with _IMPORT_LOCK:
        from dm_control import suite as dm_suite  # pylint: disable=g-import-not-at-top

    return dm_suite.ALL_TASKS


def list_tasks() -> list[str]:
    """Returns every supported environment name, "domain:task", sorted."""
    return sorted(f"{domain}:{task}" for domain, task in _all_tasks())


_SUITE_PACKAGE = "dm_control.suite"
# Held while the bare package stands in sys.modules, so another thread never takes it for the real one.
_IMPORT_LOCK = threading.Lock()


def _domain_module(domain: str) -> Optional[types.ModuleType]:
    """The suite's module for ``domain`` (its tasks in ``SUITE``); None if the suite has no such domain.

    Where ``dm_control.suite`` is not imported yet, this imports the domain's
    module alone, with the package's ``__init__`` skipped for the length of
    the import: that ``__init__`` imports all 19 domains (quadruped brings
    scipy.ndimage), about 0.3 CPU-s in every process that builds one
    environment (the driver before Ray starts, each actor, the evaluator).
    A later ``import dm_control.suite`` runs the real package, which reuses
    the module. Only files that define ``SUITE`` at top level count as
    domains, as they do for the package itself.
    """
    with _IMPORT_LOCK:
        return _domain_module_locked(domain)


def _domain_module_locked(domain: str) -> Optional[types.ModuleType]:
    if not domain.isidentifier():
        return None
    package = sys.modules.get(_SUITE_PACKAGE)
    if package is not None:
        module = getattr(package, domain, None)
        return module if isinstance(module, types.ModuleType) and hasattr(module, "SUITE") else None
    # Imported alone before (the name check, then the build, or a second environment): no file read again.
    module = sys.modules.get(f"{_SUITE_PACKAGE}.{domain}")
    if module is not None and hasattr(module, "SUITE"):
        return module
    spec = importlib.util.find_spec(_SUITE_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = os.path.join(folders[0], f"{domain}.py") if folders else ""
    try:
        with open(path, encoding="utf-8") as f:
            if "\nSUITE = " not in f.read():
                return None
    except OSError:
        return None
    bare = types.ModuleType(_SUITE_PACKAGE)
    bare.__path__, bare.__file__ = folders, spec.origin
    sys.modules[_SUITE_PACKAGE] = bare
    try:
        return importlib.import_module(f"{_SUITE_PACKAGE}.{domain}")
    finally:
        if sys.modules.get(_SUITE_PACKAGE) is bare:
            del sys.modules[_SUITE_PACKAGE]


def _did_you_mean(matches: list[str]) -> str:
    if not matches:
        return f"no close match {_LIST_HINT}"
    return f"did you mean: {', '.join(matches)}? {_LIST_HINT}"


def _close(word: str, candidates: list[str]) -> list[str]:
    return difflib.get_close_matches(word, candidates, n=5, cutoff=0.6)


def _parse_name(name: str) -> tuple[str, str]:
    """Splits and validates "domain:task"; raises UnknownEnvironmentError."""
    if not isinstance(name, str):
        raise TypeError(f"environment name must be a str, got {type(name).__name__}")
    parts = name.split(":")
    if len(parts) == 2 and all(parts):
        module = _domain_module(parts[0])
        if module is not None and parts[1] in module.SUITE:
            return parts[0], parts[1]
    # Not a task: the whole suite, for the message's suggestions.
    all_tasks = _all_tasks()
    all_names = list_tasks()
    if len(parts) != 2 or not all(parts):
        raise UnknownEnvironmentError(
            f"malformed environment name {name!r}: expected 'domain:task', e.g. "
            f"'cartpole:swingup'; {_did_you_mean(_close(name, all_names))}")
    domain, task = parts
    domains = sorted({d for d, _ in all_tasks})
    if domain not in domains:
        # Compare whole names first: a typo in the domain usually leaves the
        # task intact, so "cartpol:swingup" finds cartpole:swingup directly.
        # Failing that, a near-miss domain is still worth naming.
        matches = _close(name, all_names) or [f"{d}:*" for d in _close(domain, domains)]
        raise UnknownEnvironmentError(
            f"unknown domain {domain!r} in {name!r}; {_did_you_mean(matches)}")
    tasks = sorted(t for d, t in all_tasks if d == domain)
    if task not in tasks:
        matches = [f"{domain}:{t}" for t in _close(task, tasks)]
        if matches:
            suggestion = _did_you_mean(matches)
        else:
            # A domain has only a handful of tasks; listing them all is the
            # most useful thing we can say.
            suggestion = f"valid tasks for {domain}: {', '.join(tasks)}"
        raise UnknownEnvironmentError(f"unknown task {name!r}; {suggestion}")
    return domain, task


def check_name(name: str) -> None:
    """Validates "domain:task" (or "gym:<id>") without building anything (for CLIs)."""
    if isinstance(name, str) and name.startswith("gym:"):
        gym_adapter.check_name(name)
        return
    _parse_name(name)


def _check_int(value, what: str, minimum: int, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    # bool is an int subclass; `seed=True` is almost surely a bug.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        kind = "an int or None" if allow_none else "an int"
        raise TypeError(f"{what} must be {kind}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")


class _PhysicsClosingWrapper(wrappers.EnvironmentWrapper):
    """Frees dm_control physics (and its GL contexts) on `close()`.

    `dm_control.rl.control.Environment` inherits dm_env's no-op `close()`. An
    env that created a rendering context (quadruped:escape uploads its terrain
    to GL on every reset) then gets garbage-collected after the render
    executor has shut down, printing tracebacks at interpreter exit.
    """

    def __init__(self, environment: dm_env.Environment):
        super().__init__(environment)
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        physics = getattr(self._environment, "physics", None)
        if physics is not None:
            physics.free()
        self._environment.close()


def _has_real_action_bounds(spec) -> bool:
    minimum = np.asarray(getattr(spec, "minimum", -np.inf), np.float64)
    maximum = np.asarray(getattr(spec, "maximum", np.inf), np.float64)
    return bool(np.all(np.abs(minimum) < _UNBOUNDED_ACTION)
                and np.all(np.abs(maximum) < _UNBOUNDED_ACTION))


def make_environment(
    name: str,
    *,
    seed: int | None = None,
    action_repeat: int = 1,
    time_limit: int | None = None,
    flatten: bool = True,
    canonical_actions: bool = True,
) -> dm_env.Environment:
    """Builds a dm_control suite task as a wrapped `dm_env.Environment`.

    Args:
      name: "domain:task", e.g. "cartpole:swingup"; see `list_tasks()`.
      seed: Seed for the task's random state (initial states, targets). None
        draws fresh entropy, so episodes differ between runs.
      action_repeat: Environment steps per agent step (rewards summed,
        discounts multiplied).
      time_limit: Episode length in AGENT steps, i.e. after action repeat.
        None keeps the suite's own limit (1000 env steps for most tasks).
        Episodes cut by the limit end with discount 1.0 (truncation).
      flatten: Concatenate the observation dict into one float32 vector with
        keys in sorted order (see `FlattenObservationWrapper`).
      canonical_actions: Expose actions in [-1, 1] and rescale them to the
        task's bounds. Tasks whose actuators are unbounded (the lqr domain)
        are left as they are, since there is no range to rescale into.

    Returns:
      The environment. Close it (or use it as a context manager) to free the
      MuJoCo physics and any GL context.

    Raises:
      UnknownEnvironmentError: `name` is malformed or not a suite task.

    Names "gym:<id>" (e.g. "gym:CartPole-v1") build a gymnasium environment
    instead, through `envs.gym_adapter` (same arguments).
    """
    if isinstance(name, str) and name.startswith("gym:"):
        return gym_adapter.make_gym_environment(
            name, seed=seed, action_repeat=action_repeat, time_limit=time_limit,
            flatten=flatten, canonical_actions=canonical_actions)
    domain, task = _parse_name(name)
    _check_int(seed, "seed", 0, allow_none=True)
    _check_int(time_limit, "time_limit", 1, allow_none=True)
    _check_int(action_repeat, "action_repeat", 1)

    task_kwargs = {"random": seed}
    if time_limit is not None:
        # The suite's limit is in seconds of sim time and would fire first
        # whenever time_limit * action_repeat exceeds it; we count steps instead.
        task_kwargs["time_limit"] = float("inf")
    suite_env = _domain_module(domain).SUITE[task](**task_kwargs)
    suite_env.task.visualize_reward = False  # as dm_control.suite.load leaves it
    env: dm_env.Environment = _PhysicsClosingWrapper(suite_env)
    try:
        if action_repeat > 1:
            env = wrappers.ActionRepeatWrapper(env, action_repeat)
        # After the repeat, so the limit counts agent steps.
        if time_limit is not None:
            env = wrappers.StepLimitWrapper(env, time_limit)
        if canonical_actions:
            if _has_real_action_bounds(env.action_spec()):
                env = wrappers.CanonicalActionWrapper(env)
            else:
                _log.info("%s has unbounded actions; not canonicalising them", name)
        if flatten:
            env = wrappers.FlattenObservationWrapper(env)
        env = wrappers.Float32Wrapper(env)
    except BaseException:
        env.close()
        raise
    return env
