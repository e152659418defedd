"""``run_offline``: train an ``OfflineBuilder``'s learner on its data set, then watch it act.

The offline layout, in one process and without Ray or Reverb: the builder
makes its data set once (``make_dataset``), its learner feeds itself from it
through the ``Replicator`` (``make_input_fn``), and every ``eval_every``
learner steps the builder's greedy actor runs ``eval_episodes`` whole
episodes in the ``EnvironmentLoop`` the online layouts' evaluators use,
pulling the learner's newest weights first (the learner is its variable
source, as in ``run_local``).

Environments: the data set gets ``environment_factory`` and ``seed`` (an
agent that rolls out a teacher makes its own from them); evaluation runs on
``environment_factory(seed + 1)``, so its episodes are not the data set's.

Steps: ``learner.step()`` runs as many steps as the learner does per call, so
a run or an evaluation may land up to one call past its step count (use a
multiple of the learner's steps per call to land on it exactly).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from rlplat import controller
from rlplat import core
from rlplat import specs as specs_lib
from rlplat.environment_loop import EnvironmentLoop


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low} (got {value!r})")
    return int(value)


def dataset_size(dataset: core.OfflineDataset) -> int:
    """Rows of ``dataset``; raises ``ValueError`` if it is empty or its arrays disagree."""
    sizes = {name: len(array) for name, array in dataset.items()}
    if not sizes or len(set(sizes.values())) != 1 or 0 in sizes.values():
        raise ValueError(f"an offline data set needs non-empty arrays of one length (got {sizes})")
    return next(iter(sizes.values()))


def make_input_fn(dataset: core.OfflineDataset, global_batch_size: int, seed: int) -> core.InputFn:
    """``input_fn`` for ``Replicator.distribute``: per-replica batches of ``dataset``'s rows, forever.

    Each element is a dict of ``dataset``'s names to that batch's rows. The
    row stream is a pure function of ``seed``: epoch ``e`` is a permutation
    of the rows drawn from the stateless seed ``(seed, e)``, and consecutive
    per-replica batches make up one global batch (with several input
    pipelines, pipeline ``i`` keeps every ``num_input_pipelines``-th), so the
    global batch of every step is the same rows whatever the topology.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    num_rows = dataset_size(dataset)
    _check_int("global_batch_size", global_batch_size, 1)
    _check_int("seed", seed, 0)

    def input_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        arrays = {name: tf.constant(array) for name, array in dataset.items()}

        def epoch(e: tf.Tensor) -> tf.data.Dataset:
            stateless_seed = tf.stack([tf.constant(seed, tf.int64), e])
            return tf.data.Dataset.from_tensor_slices(
                tf.argsort(tf.random.stateless_uniform([num_rows], stateless_seed)))

        rows = (tf.data.Dataset.range(np.iinfo(np.int64).max).flat_map(epoch)
                .batch(ctx.get_per_replica_batch_size(global_batch_size), drop_remainder=True))
        if ctx.num_input_pipelines > 1:
            rows = rows.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return (rows.map(lambda i: {name: tf.gather(array, i) for name, array in arrays.items()})
                .prefetch(tf.data.AUTOTUNE))

    return input_fn


def record_episodes(environment: Any, actor: core.Actor, num_episodes: int, action_noise: float = 0.0,
                    seed: int = 0) -> Tuple[Dict[str, np.ndarray], List[float]]:
    """Runs ``actor`` for ``num_episodes`` whole episodes; returns its steps as a data set, and the returns.

    The data set has one row per step: ``observation`` [N, O] and the
    ``action`` [N, A] the actor chose there (float32). The actor is told
    nothing (no ``observe``): it acts, e.g. a teacher's greedy actor.

    ``action_noise`` > 0 steps the environment with the chosen action plus
    Gaussian noise of that standard deviation (``seed``'s stream), clipped to
    the action spec's bounds, while the row keeps the clean action: the
    data then covers states just off the actor's own path, labelled with
    how it would act there (Laskey et al. 2017, "DART"), which is what a
    clone needs to recover from its own small errors. The returns are
    those of the noisy episodes.
    """
    num_episodes = _check_int("num_episodes", num_episodes, 1)
    if not action_noise >= 0:
        raise ValueError(f"action_noise must be >= 0 (got {action_noise!r})")
    spec = environment.action_spec()
    low, high = getattr(spec, "minimum", -np.inf), getattr(spec, "maximum", np.inf)
    rng = np.random.default_rng(seed)
    observations: List[np.ndarray] = []
    actions: List[np.ndarray] = []
    returns: List[float] = []
    for _ in range(num_episodes):
        timestep, total = environment.reset(), 0.0
        while not timestep.last():
            observations.append(np.array(timestep.observation, np.float32))
            actions.append(np.array(actor.select_action(timestep.observation), np.float32))
            executed = actions[-1]
            if action_noise > 0:
                noise = rng.normal(0.0, action_noise, executed.shape)
                executed = np.clip(executed + noise, low, high).astype(np.float32)
            timestep = environment.step(executed)
            total += float(timestep.reward or 0.0)
        returns.append(total)
    return {"observation": np.stack(observations), "action": np.stack(actions)}, returns


def run_offline(builder: core.OfflineBuilder,
                environment_factory: core.MakeEnvironment,
                num_learner_steps: int,
                eval_every: Optional[int] = None,
                eval_episodes: int = 5,
                seed: int = 0,
                *,
                replicator: Any = None,
                checkpoint_dir: Optional[str] = None) -> Dict[str, Any]:
    """Trains ``builder``'s learner for ``num_learner_steps`` steps from its data set and evaluates it.

    Args:
      builder: the agent's ``OfflineBuilder``.
      environment_factory: ``seed -> dm_env.Environment``.
      num_learner_steps: learner steps to take (at least; see the module docstring).
      eval_every: learner steps between evaluations; None: only at the end.
      eval_episodes: greedy episodes per evaluation (0: none).
      seed: seeds the data set, its order and the data set's environment;
        evaluation uses ``seed + 1``.
      replicator: the learner's ``Replicator`` (default: ``make_replicator()``).
      checkpoint_dir: if given, the learner's ``checkpointables()`` are saved
        there at the end (``Checkpointer``: ``ckpt-<learner step>``).

    Returns:
      ``learner_steps``, ``dataset_size``, ``metrics`` (the last call's),
      ``evaluations`` (list of ``(learner_steps, mean return)``),
      ``eval_returns`` (the last evaluation's episodes), and seconds spent
      making the data set, learning and evaluating (``dataset_s``,
      ``learn_s``, ``eval_s``) and in all (``wall_s``); ``checkpoint``, the
      saved checkpoint's path (None without ``checkpoint_dir``).
    """
    num_learner_steps = _check_int("num_learner_steps", num_learner_steps, 1)
    eval_episodes = _check_int("eval_episodes", eval_episodes, 0)
    seed = _check_int("seed", seed, 0)
    period = num_learner_steps if eval_every is None else _check_int("eval_every", eval_every, 1)
    from rlplat import replication  # pylint: disable=g-import-not-at-top  (imports TF)

    start = time.perf_counter()
    dataset = builder.make_dataset(environment_factory, seed)
    size = dataset_size(dataset)
    dataset_s = time.perf_counter() - start
    environment = environment_factory(seed + 1)
    try:
        spec = specs_lib.make_environment_spec(environment)
        learner = builder.make_learner(spec, replicator or replication.make_replicator(), dataset, seed)
        actor = builder.make_actor(spec, learner, seed + 1)
        # max_env_errors=0: a failing environment stops the run rather than skew the returns.
        loop = EnvironmentLoop(environment, actor, max_env_errors=0)
        evaluations: List[Tuple[int, float]] = []
        last: Dict[str, Any] = {"metrics": {}, "returns": [], "checkpoint": None}
        seconds = {"learn_s": 0.0, "eval_s": 0.0}

        def train(n: int) -> Dict[str, float]:
            del n  # a learner call takes its own steps_per_call; events land at or after their step
            t0 = time.perf_counter()
            last["metrics"] = learner.step()
            seconds["learn_s"] += time.perf_counter() - t0
            return last["metrics"]

        def evaluate() -> Dict[str, float]:
            if not eval_episodes:
                return {}
            t0 = time.perf_counter()
            actor.update(wait=True)  # always the newest weights
            last["returns"] = [float(loop.run_episode()["episode_return"]) for _ in range(eval_episodes)]
            evaluations.append((learner.num_steps, float(np.mean(last["returns"]))))
            seconds["eval_s"] += time.perf_counter() - t0
            return {"eval_return": evaluations[-1][1]}

        def save() -> None:
            if checkpoint_dir is not None:
                from rlplat.utils import checkpointing  # pylint: disable=g-import-not-at-top  (imports TF)

                last["checkpoint"] = checkpointing.Checkpointer(
                    checkpoint_dir, **learner.checkpointables()).save(learner.num_steps)

        # The same outer loop as every other run: evaluations on the learner-step grid, one at the end,
        # and the checkpoint at the end.
        program = controller.StepProgram(steps=lambda: learner.num_steps, train=train, evaluate=evaluate,
                                         checkpoint=save, report=lambda *_: None, steps_per_loop=1)
        program.run(num_learner_steps, eval_every_steps=period if eval_episodes else 0)
        metrics, returns, checkpoint = last["metrics"], last["returns"], last["checkpoint"]
        learn_s, eval_s = seconds["learn_s"], seconds["eval_s"]
        return {"learner_steps": learner.num_steps, "dataset_size": size, "metrics": metrics,
                "evaluations": evaluations, "eval_returns": returns, "dataset_s": dataset_s,
                "learn_s": learn_s, "eval_s": eval_s, "wall_s": time.perf_counter() - start,
                "checkpoint": checkpoint}
    finally:
        environment.close()
