"""A single-process, in-memory IMPALA loop for learning tests (no Ray, no Reverb).

The real pieces learn: ``IMPALAActor`` (the NumPy acting path), the
``IMPALALearner`` step (its losses and V-trace) and the builder's network.
Only transport is replaced: ``UnrollCollector`` writes unrolls in the
``SequenceAdder`` layout into a list, and the learner reads GLOBAL batches of
them from a Python queue. Acting and learning take turns in one thread (a
batch of unrolls with the newest weights, then one learner step on it), so a
run is deterministic for a seed and the policy lag is 0.
"""

from __future__ import annotations

import queue
from typing import Any, Callable, Dict, List, Optional

import dm_env
import numpy as np
import tensorflow as tf
import tree

from rlplat_agents.impala.builder import IMPALABuilder
from rlplat_agents.impala.config import IMPALAConfig
from rlplat_agents.impala.learning import IMPALALearner
from rlplat import replication
from rlplat import specs as specs_lib
from rlplat.replay.sequence_signature import SequenceStep


class UnrollCollector:
    """``SequenceAdder``'s item layout, in memory (see its module docstring).

    Step k holds o_k, a_k, r_k, discount_k, extras_k, log mu(a_k|o_k), the
    version and mask 1; step T of an item is also step 0 of the next. After an
    episode's last transition: one step with the final observation and mask 0,
    then zeros up to T + 1.
    """

    def __init__(self, unroll_length: int):
        self._n = unroll_length + 1
        self._steps: List[SequenceStep] = []
        self._obs = None
        self.items: List[SequenceStep] = []

    def add_first(self, timestep: dm_env.TimeStep) -> None:
        if self._steps:  # Unfinished episode: written as truncated.
            self._finish()
        self._obs = np.array(timestep.observation, np.float32)

    def add(self, action, next_timestep, *, extras, behaviour_log_prob, policy_version) -> None:
        step = SequenceStep(self._obs, np.array(action, np.float32),
                            np.float32(next_timestep.reward), np.float32(next_timestep.discount),
                            tree.map_structure(lambda x: np.array(x, np.float32), extras),
                            np.float32(behaviour_log_prob), np.int64(policy_version),
                            np.float32(1.0))
        self._steps.append(step)
        if len(self._steps) == self._n:
            self._write()
            self._steps.append(step)
        self._obs = np.array(next_timestep.observation, np.float32)
        if next_timestep.last():
            self._finish()
            self._obs = None

    def _finish(self) -> None:
        zeros = tree.map_structure(np.zeros_like, self._steps[0])
        self._steps.append(zeros._replace(observation=self._obs))
        while len(self._steps) < self._n:
            self._steps.append(zeros)
        self._write()

    def _write(self) -> None:
        self.items.append(tree.map_structure(lambda *xs: np.stack(xs), *self._steps))
        self._steps = []

    def take(self, n: int) -> List[SequenceStep]:
        out, self.items = self.items[:n], self.items[n:]
        return out


class LocalIMPALA:
    """IMPALA in one thread: ``num_envs`` actors (round robin), one learner.

    Args:
      environment_factory: ``seed -> dm_env.Environment``.
      config: the agent's ``IMPALAConfig``.
      seed: seeds the network initialisation, the actors and the environments.
      num_envs: actors, each with its own environment; every batch takes
        ``global_batch_size / num_envs`` unrolls from each.
    """

    def __init__(self, environment_factory: Callable[[int], dm_env.Environment],
                 config: IMPALAConfig, seed: int = 0, num_envs: int = 2):
        if config.global_batch_size % num_envs:
            raise ValueError("global_batch_size must be a multiple of num_envs")
        tf.random.set_seed(seed)
        self.config = config
        self._factory = environment_factory
        self._envs = [environment_factory(seed * 1000 + i) for i in range(num_envs)]
        self.spec = specs_lib.make_environment_spec(self._envs[0])
        self.builder = IMPALABuilder(config=config, steps_per_call=1)
        signature = tree.map_structure(  # Items' signature, batched.
            lambda s: tf.TensorSpec((config.global_batch_size,) + tuple(s.shape), s.dtype),
            self.builder.signature(self.spec))
        self._queue: "queue.Queue" = queue.Queue()

        def batches():
            while True:
                batch = self._queue.get()
                if batch is None:
                    return
                yield batch

        dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
        repl = replication.make_replicator()
        self.learner = IMPALALearner(config, self.spec, repl, repl.distribute(dataset),
                                     steps_per_call=1)
        self._collectors = [UnrollCollector(config.unroll_length) for _ in self._envs]
        self._actors = [
            self.builder.make_actor(self.spec, self.learner, c, i, seed=seed * 1000 + i)
            for i, c in enumerate(self._collectors)]
        self._timesteps: List[Optional[dm_env.TimeStep]] = [None] * num_envs
        self._episode_return = [0.0] * num_envs
        self.episode_returns: List[float] = []
        self.actor_steps = 0
        self._eval_env = environment_factory(seed * 1000 + 999)
        self._eval_actor = self.builder.make_actor(self.spec, self.learner, None, 0,
                                                   seed=seed * 1000 + 999, evaluation=True)
        self.last_batch: Optional[SequenceStep] = None

    def close(self) -> None:
        self._queue.put(None)
        for env in self._envs + [self._eval_env]:
            env.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ acting
    def _act_until(self, i: int, num_items: int) -> None:
        env, actor, collector = self._envs[i], self._actors[i], self._collectors[i]
        actor.update(wait=True)  # Newest weights: no policy lag.
        while len(collector.items) < num_items:
            timestep = self._timesteps[i]
            if timestep is None or timestep.last():
                timestep = env.reset()
                actor.observe_first(timestep)
                self._episode_return[i] = 0.0
            action = actor.select_action(timestep.observation)
            timestep = env.step(action)
            actor.observe(action, timestep)
            self._episode_return[i] += float(timestep.reward or 0.0)
            self.actor_steps += 1
            if timestep.last():
                self.episode_returns.append(self._episode_return[i])
            self._timesteps[i] = timestep

    def next_batch(self) -> SequenceStep:
        """A global batch of fresh unrolls, ``global_batch_size / num_envs`` per actor."""
        per_env = self.config.global_batch_size // len(self._envs)
        items: List[SequenceStep] = []
        for i, collector in enumerate(self._collectors):
            self._act_until(i, per_env)
            items += collector.take(per_env)
        return tree.map_structure(lambda *xs: np.stack(xs), *items)

    # ---------------------------------------------------------------- learning
    def train_step(self) -> Dict[str, float]:
        """One batch of unrolls with the current weights, then one learner step on it."""
        self.last_batch = self.next_batch()
        self._queue.put(self.last_batch)
        return self.learner.step()

    def train(self, num_steps: int, on_step: Optional[Callable[[int, Dict[str, float]], Any]] = None):
        metrics = {}
        for k in range(num_steps):
            metrics = self.train_step()
            if on_step is not None:
                on_step(k, metrics)
        return metrics

    def evaluate(self, num_episodes: int = 1) -> float:
        """Mean greedy return (the evaluator's policy: argmax or the Gaussian mean)."""
        self._eval_actor.update(wait=True)
        total = 0.0
        for _ in range(num_episodes):
            timestep = self._eval_env.reset()
            self._eval_actor.observe_first(timestep)
            while not timestep.last():
                action = self._eval_actor.select_action(timestep.observation)
                timestep = self._eval_env.step(action)
                self._eval_actor.observe(action, timestep)
                total += float(timestep.reward or 0.0)
        return total / num_episodes


def greedy_action(run: "LocalIMPALA", observation) -> np.ndarray:
    """The evaluator's action at ``observation`` with the learner's current weights."""
    actor = run.builder.make_actor(run.spec, run.learner, None, 0, seed=0, evaluation=True)
    actor.observe_first(dm_env.restart(np.asarray(observation, np.float32)))
    return np.asarray(actor.select_action(np.asarray(observation, np.float32)))


def random_return(environment: dm_env.Environment, num_episodes: int, seed: int = 0) -> float:
    """Mean return of uniformly random actions in the action spec's bounds."""
    from dm_env import specs  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(seed)
    spec = environment.action_spec()
    total = 0.0
    for _ in range(num_episodes):
        timestep = environment.reset()
        while not timestep.last():
            if isinstance(spec, specs.DiscreteArray):
                action = np.int32(rng.integers(spec.num_values))
            else:
                action = rng.uniform(spec.minimum, spec.maximum, spec.shape).astype(spec.dtype)
            timestep = environment.step(action)
            total += float(timestep.reward or 0.0)
    return total / num_episodes


class PointMass(dm_env.Environment):
    """A tiny continuous task with a known optimum: bring a 1-D mass to x = 0 and hold it.

    Observation (x, v); action a in [-1, 1] (values outside are clipped, as
    the control suite's actuators do); ``v += DT * a``, ``x += DT * v``;
    reward ``exp(-(x / 0.25)^2)`` in [0, 1]; x starts uniform in [-1, 1] at
    rest. Episodes end by the time limit (truncation: discount 1), like the
    control suite's. Over 100 steps: uniformly random actions score ~11,
    a = 0 scores ~23, a constant push ~3, and a PD controller
    ``clip(-10 x - 4 v)`` ~95 (the optimum is a bit above).
    """

    DT = 0.1

    def __init__(self, seed: int = 0, episode_length: int = 100):
        self._rng = np.random.default_rng(seed)
        self._length = int(episode_length)
        self._t, self._x, self._v = 0, 0.0, 0.0

    def reset(self) -> dm_env.TimeStep:
        self._t, self._x, self._v = 0, float(self._rng.uniform(-1.0, 1.0)), 0.0
        return dm_env.restart(self._observation())

    def step(self, action) -> dm_env.TimeStep:
        a = float(np.clip(np.asarray(action, np.float64).reshape(-1)[0], -1.0, 1.0))
        self._v += self.DT * a
        self._x += self.DT * self._v
        self._t += 1
        reward = float(np.exp(-(self._x / 0.25) ** 2))
        if self._t >= self._length:
            return dm_env.truncation(reward, self._observation())
        return dm_env.transition(reward, self._observation())

    def _observation(self) -> np.ndarray:
        return np.array([self._x, self._v], np.float32)

    def observation_spec(self):
        from dm_env import specs  # pylint: disable=g-import-not-at-top
        return specs.Array((2,), np.float32)

    def action_spec(self):
        from dm_env import specs  # pylint: disable=g-import-not-at-top
        return specs.BoundedArray((1,), np.float32, -1.0, 1.0)

    def reward_spec(self):
        from dm_env import specs  # pylint: disable=g-import-not-at-top
        return specs.Array((), np.float32)

    def discount_spec(self):
        from dm_env import specs  # pylint: disable=g-import-not-at-top
        return specs.BoundedArray((), np.float32, 0.0, 1.0)
