"""K environments in one actor process, with one policy call per step for all of them.

An actor process spends most of a step outside the environment: the policy
(a few NumPy matrix-vector products), the replay write and the loop itself.
``VectorEnvironmentLoop`` steps K environments side by side and runs the
policy once on the batch of their K observations (matrix-matrix products,
whose cost grows far slower than K). Everything that is per environment stays
per environment: each has its own actor object (its own exploration noise or
sampling, seeded like a separate actor's) writing through its own adder
stream, so the transitions are those of K separate actors.

Actors that can take part implement ``BatchActing`` beside ``core.Actor``:

- ``policy_outputs(observations [K, ...])``: the network's outputs for the
  batch with the actor's current weights (pulling them first if it has none);
  only the first actor (the leader) is asked, and only it pulls weights;
- ``finish_action(output, policy_version)``: one environment's action from
  its row (noise, sampling, the bookkeeping its adder needs).

An agent may instead give ONE ``VectorActor`` for all K environments, which
also batches what ``finish_action`` and ``observe`` do per environment
(sampling K actions at once, one replay write for K steps) while keeping
each environment's own random stream and replay stream. K separate
``BatchActing`` actors are driven through the same interface
(``SeparateActors``), so the loop itself has one path.

The chunk statistics have the keys of ``EnvironmentLoop.run_steps`` and count
environment steps over all K environments; environment errors and simulator
divergence are handled per environment as there.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import dm_env
import numpy as np

from rlplat import core
from rlplat.environment_loop import EnvironmentLoop, broken_episode_end


@runtime_checkable
class BatchActing(Protocol):
    """What an actor adds to act for several environments with one policy call."""

    def policy_outputs(self, observations: np.ndarray) -> np.ndarray:
        """The policy network's outputs [K, ...] for observations [K, ...]."""

    def finish_action(self, output: np.ndarray, policy_version: int) -> Any:
        """One environment's action from its row of ``policy_outputs``."""


@runtime_checkable
class VectorActor(Protocol):
    """One actor for K environments; the loop steps environments 0..M-1 (M <= K) each round."""

    @property
    def num_environments(self) -> int:
        """K."""

    @property
    def policy_version(self) -> int:
        """The version of the weights the last actions were chosen with."""

    def observe_first(self, index: int, timestep: dm_env.TimeStep) -> None:
        """Environment ``index`` starts an episode at ``timestep``."""

    def select_actions(self, observations: np.ndarray) -> Sequence[Any]:
        """Actions for environments 0..M-1 at ``observations`` [M, ...] (pulling weights first if it has none)."""

    def observe(self, actions: Sequence[Any], timesteps: Sequence[dm_env.TimeStep]) -> None:
        """The outcomes of the last ``select_actions`` (environment k got ``actions[k]``)."""

    def update(self) -> None:
        """Pulls fresh weights when they are due."""


class BlockedDraws:
    """K environments' random streams, each pre-drawn in blocks by its own function.

    A ``VectorActor`` keeps each environment's randomness its own (so its
    actions are those of a separate actor with that seed) while taking the
    draws of environments 0..M-1 as one array per step. ``draw_blocks[k]()``
    returns environment k's next block, [B, ...] with the same B and row
    shape for every k; a block used up is replaced by the next one from the
    same function, in the order a separate actor would draw them.
    """

    def __init__(self, draw_blocks: Sequence[Callable[[], np.ndarray]]):
        self._draw_blocks = list(draw_blocks)
        self._blocks = np.stack([draw() for draw in self._draw_blocks])
        self._next = np.zeros(len(self._draw_blocks), np.int64)
        self._rows = np.arange(len(self._draw_blocks))

    def take(self, m: int) -> np.ndarray:
        """The next row of environments 0..m-1 ([m, ...]), each from its own stream."""
        index = self._next[:m]  # a view, advanced in place
        rows = self._blocks[self._rows[:m], index]
        index += 1
        for k in np.flatnonzero(index == self._blocks.shape[1]):
            self._blocks[k] = self._draw_blocks[k]()
            index[k] = 0
        return rows


class SeparateActors:
    """A ``VectorActor`` made of K ``BatchActing`` actors: the leader's policy call, the rest per actor."""

    def __init__(self, actors: Sequence[core.Actor]):
        for actor in actors:
            if not isinstance(actor, BatchActing):
                raise TypeError(f"{type(actor).__name__} cannot act for several environments at once "
                                "(it has no policy_outputs/finish_action); run one environment per actor")
        self._actors = list(actors)
        self._leader = self._actors[0]

    @property
    def num_environments(self) -> int:
        return len(self._actors)

    @property
    def policy_version(self) -> int:
        return self._leader.policy_version

    def observe_first(self, index: int, timestep: dm_env.TimeStep) -> None:
        self._actors[index].observe_first(timestep)

    def select_actions(self, observations: np.ndarray) -> List[Any]:
        outputs = self._leader.policy_outputs(observations)
        version = self._leader.policy_version
        return [actor.finish_action(output, version) for actor, output in zip(self._actors, outputs)]

    def observe(self, actions: Sequence[Any], timesteps: Sequence[dm_env.TimeStep]) -> None:
        for actor, action, timestep in zip(self._actors, actions, timesteps):
            actor.observe(action, timestep)

    def update(self) -> None:
        self._leader.update()


class VectorEnvironmentLoop:
    """Steps K environments with one policy call per step for all of them.

    Args:
      environments: K ``dm_env.Environment``s.
      actors: K actors implementing ``core.Actor`` and ``BatchActing``
        (``actors[0]`` computes the batch's policy outputs and pulls weights),
        or one ``VectorActor`` for all K.
      physics_errors, max_env_errors: as for ``EnvironmentLoop`` (the bound
        counts errors of all K environments together).
    """

    def __init__(self, environments: Sequence[dm_env.Environment],
                 actors: Union[Sequence[core.Actor], VectorActor],
                 physics_errors: Optional[Tuple[type, ...]] = None, max_env_errors: int = 100):
        if isinstance(actors, VectorActor):
            actor = actors
        else:
            if len(environments) != len(actors):
                raise ValueError(f"need one actor per environment (got {len(environments)} environments "
                                 f"and {len(actors)} actors)")
            actor = SeparateActors(actors)
        if not environments or actor.num_environments != len(environments):
            raise ValueError(f"the actor acts for {actor.num_environments} environments, "
                             f"got {len(environments)}")
        # One EnvironmentLoop per environment keeps its episode and error bookkeeping
        # (the actor is the vector loop's: those loops never act).
        self._loops = [EnvironmentLoop(env, None, physics_errors=physics_errors, max_env_errors=max_env_errors)
                       for env in environments]
        self._environments = list(environments)
        self._actor = actor
        self._max_env_errors = int(max_env_errors)
        self.total_steps = 0

    @property
    def num_environments(self) -> int:
        return len(self._environments)

    def run_steps(self, num_steps: int) -> Dict[str, Any]:
        """Runs exactly ``num_steps`` environment steps in all, spread evenly over the K environments.

        Each round steps every environment once; a final partial round steps
        the first ``num_steps % K``. Returns ``EnvironmentLoop.run_steps``'s keys.
        """
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1 (got {num_steps})")
        clock = time.perf_counter
        k = len(self._loops)
        t = {"env": 0.0, "policy": 0.0, "observe": 0.0, "update": 0.0}
        returns: List[float] = []
        lengths: List[int] = []
        errors = {"physics": 0, "env": 0}
        tracebacks: List[str] = []
        environments = self._environments
        start, steps = clock(), 0
        while steps < num_steps:
            m = min(k, num_steps - steps)
            loops = self._loops[:m]
            for i, loop in enumerate(loops):
                if loop.current_timestep is None:
                    self._start_episode(i, t, errors)
            t0 = clock()
            actions = self._actor.select_actions(np.stack([loop.current_observation for loop in loops]))
            t1 = clock()
            timesteps = []
            for i, action in enumerate(actions):  # inline: this loop runs once per frame
                try:
                    timesteps.append(environments[i].step(action))
                except Exception as e:  # pylint: disable=broad-except  (physics or other, as EnvironmentLoop)
                    timesteps.append(self._failed_step(i, e, errors))
            t2 = clock()
            self._actor.observe(actions, timesteps)
            t3 = clock()
            for loop, timestep in zip(loops, timesteps):
                done = loop.advance(timestep)
                if done is not None:
                    returns.append(done[0])
                    lengths.append(done[1])
            t4 = clock()
            self._actor.update()
            t["policy"] += t1 - t0
            t["env"] += t2 - t1
            t["observe"] += t3 - t2
            t["update"] += clock() - t4
            steps += m
        for loop in self._loops:
            tracebacks += loop.take_new_tracebacks()
        wall = clock() - start
        self.total_steps += steps
        return {
            "env_steps": steps, "episodes": len(returns), "episode_returns": returns,
            "episode_lengths": lengths, "physics_errors": errors["physics"], "env_errors": errors["env"],
            "env_error_tracebacks": tracebacks, "policy_version": self._actor.policy_version,
            "env_s": t["env"], "policy_s": t["policy"], "observe_s": t["observe"],
            "update_s": t["update"], "wall_s": wall, "steps_per_s": steps / wall if wall > 0 else float("inf"),
            "num_environments": k,
        }

    def _start_episode(self, i: int, t: Dict[str, float], errors: Dict[str, int]) -> None:
        """Resets environment ``i`` (a failed reset is retried) and tells the actor."""
        loop = self._loops[i]
        clock = time.perf_counter
        while loop.current_timestep is None:
            t0 = clock()
            try:
                timestep = self._environments[i].reset()
            except Exception as e:  # pylint: disable=broad-except  (EnvironmentLoop's policy)
                errors["env"] += 1
                self._count_error(i, e, "reset")
                t["env"] += clock() - t0
                continue
            t1 = clock()
            self._actor.observe_first(i, timestep)
            t["env"] += t1 - t0
            t["observe"] += clock() - t1
            loop.start_episode(timestep)

    def _failed_step(self, i: int, error: Exception, errors: Dict[str, int]) -> dm_env.TimeStep:
        """Counts environment ``i``'s failed step and ends its episode (``broken_episode_end``)."""
        loop = self._loops[i]
        if isinstance(error, loop.physics_error_types):
            errors["physics"] += 1
            loop.total_physics_errors += 1
        else:
            errors["env"] += 1
            self._count_error(i, error, "step")
        return broken_episode_end(loop.current_timestep)

    def _count_error(self, i: int, error: Exception, where: str) -> None:
        # The bound is over all K environments: the sum of every loop's count.
        self._loops[i].count_env_error(error, where,
                                       total=sum(loop.total_env_errors for loop in self._loops) + 1)
