"""An agent-agnostic actor/environment loop that runs chunks of steps.

Remote layouts call ``run_steps(n)`` once per chunk (hundreds to thousands of
steps), never once per step: a Ray call costs ~0.6 ms, several env steps. The
loop keeps the episode in progress across chunks, so chunk boundaries do not
cut episodes.

Every chunk returns counts and a time split (env / policy / observe (the
adder's write) / update (weight pulls) / other) so throughput problems are
visible without a profiler.

MuJoCo ``PhysicsError`` (the simulation diverged): the episode ends as a
TERMINATION (discount 0, reward 0, the last good observation), so nothing
bootstraps from a broken state; the error is counted and the loop carries on
with a fresh episode.

Any other exception from the environment's ``step`` or ``reset`` (a bug in a
task, a flaky simulator binding) is counted as an ``env_error``: a failed
step ends the episode the same way, a failed reset is retried. The first
traceback of each exception type is logged and handed back once in the
chunk's stats (``env_error_tracebacks``), so a remote actor's driver can
write it to the run's logs. Past ``max_env_errors`` in this loop's lifetime
the loop raises ``EnvironmentFailedError``: an environment that keeps failing
is broken, and its actor should fail loudly rather than spin.
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import dm_env
import numpy as np

from rlplat import core

_log = logging.getLogger(__name__)


class EnvironmentFailedError(RuntimeError):
    """The environment raised more than ``max_env_errors`` times."""


def _physics_errors() -> Tuple[type, ...]:
    # Imported lazily so the loop works without dm_control/mujoco installed.
    found: List[type] = []
    try:
        from dm_control.rl import control  # pylint: disable=g-import-not-at-top

        found.append(control.PhysicsError)
    except ImportError:
        pass
    try:
        import mujoco  # pylint: disable=g-import-not-at-top

        found.append(mujoco.FatalError)
    except (ImportError, AttributeError):
        pass
    return tuple(found)


class EnvironmentLoop:
    """Runs an actor in an environment, in chunks of steps or whole episodes.

    Args:
      environment: a ``dm_env.Environment``.
      actor: a ``core.Actor``; it receives every step through
        ``observe_first``/``observe`` and ``update()`` after every step (the
        actor decides when a pull is due).
      counter_fn: optional callback, called once per ``run_steps`` chunk with
        the chunk's stats (e.g. to add to a shared counter). Never per step.
      physics_errors: exception types that mean "the simulation diverged";
        defaults to dm_control's ``PhysicsError`` and ``mujoco.FatalError``.
      max_env_errors: other exceptions from ``step``/``reset`` tolerated over
        the loop's lifetime before it raises ``EnvironmentFailedError``.
    """

    def __init__(self, environment: dm_env.Environment, actor: core.Actor,
                 counter_fn: Optional[Callable[[Dict[str, Any]], None]] = None,
                 physics_errors: Optional[Tuple[type, ...]] = None,
                 max_env_errors: int = 100):
        if max_env_errors < 0:
            raise ValueError(f"max_env_errors must be >= 0 (got {max_env_errors})")
        self._env = environment
        self._actor = actor
        self._counter_fn = counter_fn
        self._physics_errors = _physics_errors() if physics_errors is None else tuple(physics_errors)
        self._timestep: Optional[dm_env.TimeStep] = None  # None: start a new episode.
        self._episode_return = 0.0
        self._episode_length = 0
        self.total_steps = 0
        self.total_episodes = 0
        self.total_physics_errors = 0
        self.total_env_errors = 0
        self._max_env_errors = int(max_env_errors)
        self._seen_error_types: set = set()
        self._new_tracebacks: List[str] = []

    # -------------------------------------------------------------- chunks
    def run_steps(self, num_steps: int) -> Dict[str, Any]:
        """Runs exactly ``num_steps`` environment steps (episodes continue across calls).

        Returns:
          ``env_steps``, ``episodes`` (completed in this chunk),
          ``episode_returns``/``episode_lengths`` (of those episodes),
          ``physics_errors``, ``env_errors``, ``env_error_tracebacks`` (the
          first of each exception type, once), ``policy_version`` and seconds spent in
          ``env_s``, ``policy_s``, ``observe_s``, ``update_s`` and in total
          (``wall_s``), plus ``steps_per_s``.
        """
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1 (got {num_steps})")
        stats = self._run(num_steps, stop_at_episode_end=False)
        if self._counter_fn is not None:
            self._counter_fn(stats)
        return stats

    def _run(self, num_steps: int, stop_at_episode_end: bool) -> Dict[str, Any]:
        env, actor = self._env, self._actor
        clock = time.perf_counter
        t_env = t_policy = t_observe = t_update = 0.0
        returns: List[float] = []
        lengths: List[int] = []
        physics_errors = env_errors = 0
        start = clock()
        steps = 0
        while steps < num_steps:
            if self._timestep is None:
                t0 = clock()
                try:
                    self._timestep = env.reset()
                except Exception as e:  # pylint: disable=broad-except  (see module docstring)
                    env_errors += 1
                    self._env_error(e, "reset")
                    t_env += clock() - t0
                    continue
                t1 = clock()
                actor.observe_first(self._timestep)
                t_env += t1 - t0
                t_observe += clock() - t1
                self._episode_return, self._episode_length = 0.0, 0
            t0 = clock()
            action = actor.select_action(self._timestep.observation)
            t1 = clock()
            try:
                timestep = env.step(action)
            except self._physics_errors:  # pylint: disable=catching-non-exception
                timestep = broken_episode_end(self._timestep)
                physics_errors += 1
            except Exception as e:  # pylint: disable=broad-except  (see module docstring)
                env_errors += 1
                self._env_error(e, "step")
                timestep = broken_episode_end(self._timestep)
            t2 = clock()
            actor.observe(action, timestep)
            t3 = clock()
            actor.update()
            t4 = clock()
            t_policy += t1 - t0
            t_env += t2 - t1
            t_observe += t3 - t2
            t_update += t4 - t3
            steps += 1
            self._episode_return += float(timestep.reward or 0.0)
            self._episode_length += 1
            if timestep.last():
                returns.append(self._episode_return)
                lengths.append(self._episode_length)
                self._timestep = None
                if stop_at_episode_end:
                    break
            else:
                self._timestep = timestep
        wall = clock() - start
        self.total_steps += steps
        self.total_episodes += len(returns)
        self.total_physics_errors += physics_errors
        tracebacks, self._new_tracebacks = self._new_tracebacks, []
        return {
            "env_steps": steps, "episodes": len(returns),
            "episode_returns": returns, "episode_lengths": lengths,
            "physics_errors": physics_errors, "env_errors": env_errors,
            "env_error_tracebacks": tracebacks,
            "policy_version": actor.policy_version,
            "env_s": t_env, "policy_s": t_policy, "observe_s": t_observe,
            "update_s": t_update, "wall_s": wall,
            "steps_per_s": steps / wall if wall > 0 else float("inf"),
        }

    # ------------------------------------------ one step at a time (vector loop)
    # ``rlplat.vector_loop`` drives K of these loops' environments itself (one
    # policy call for all K) and keeps each one's episode bookkeeping here.
    @property
    def current_timestep(self) -> Optional[dm_env.TimeStep]:
        """The last timestep of the episode in progress; None between episodes."""
        return self._timestep

    @property
    def current_observation(self) -> Any:
        return self._timestep.observation

    @property
    def physics_error_types(self) -> Tuple[type, ...]:
        return self._physics_errors

    def start_episode(self, first: dm_env.TimeStep) -> None:
        """Starts an episode at ``first`` (the environment was reset and the actor told)."""
        self._timestep = first
        self._episode_return, self._episode_length = 0.0, 0

    def advance(self, timestep: dm_env.TimeStep) -> Optional[Tuple[float, int]]:
        """Counts one step; (episode return, length) when it ended the episode, else None."""
        self.total_steps += 1
        self._episode_return += float(timestep.reward or 0.0)
        self._episode_length += 1
        if timestep.last():
            self.total_episodes += 1
            self._timestep = None
            return self._episode_return, self._episode_length
        self._timestep = timestep
        return None

    def take_new_tracebacks(self) -> List[str]:
        """The first traceback of each new exception type since the last call."""
        tracebacks, self._new_tracebacks = self._new_tracebacks, []
        return tracebacks

    def count_env_error(self, error: Exception, where: str, total: Optional[int] = None) -> None:
        """Counts an environment exception; ``total`` (errors of a whole vector loop) sets the bound."""
        self._env_error(error, where, total)

    # ------------------------------------------------------------- episodes
    def run_episode(self) -> Dict[str, Any]:
        """Runs one whole, fresh episode (for evaluation); returns its return and length.

        An episode in progress from ``run_steps`` is abandoned. ``counter_fn``
        is not called (evaluation steps are not training steps).
        """
        self._timestep = None
        stats = self._run(2**62, stop_at_episode_end=True)
        return {"episode_return": stats["episode_returns"][0],
                "episode_length": stats["episode_lengths"][0],
                "physics_error": bool(stats["physics_errors"]),
                "policy_version": stats["policy_version"], "wall_s": stats["wall_s"]}

    def _env_error(self, error: Exception, where: str, total: Optional[int] = None) -> None:
        """Counts an environment exception; logs its traceback once per type; raises past the bound."""
        self.total_env_errors += 1
        count = self.total_env_errors if total is None else total
        kind = type(error).__qualname__
        if kind not in self._seen_error_types:
            self._seen_error_types.add(kind)
            text = "".join(traceback.format_exception(error))
            self._new_tracebacks.append(f"environment {where} raised {kind}:\n{text}")
            _log.error("environment %s raised %s; ending the episode and carrying on "
                       "(%d of at most %d)\n%s", where, kind, count,
                       self._max_env_errors, text)
        if count > self._max_env_errors:
            raise EnvironmentFailedError(
                f"the environment raised {count} times (more than max_env_errors="
                f"{self._max_env_errors}); last: {kind}: {error}") from error


def broken_episode_end(last: dm_env.TimeStep) -> dm_env.TimeStep:
    """A termination (reward 0, discount 0) at the last good observation: nothing bootstraps."""
    return dm_env.TimeStep(dm_env.StepType.LAST, np.float32(0.0), np.float32(0.0), last.observation)

