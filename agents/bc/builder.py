"""BC as an ``OfflineBuilder``: its data set is a D4PG run's policy, rolled out greedily."""

from __future__ import annotations

import dataclasses
from typing import Any, List, Tuple

from rlplat_agents.bc.config import BCConfig
from rlplat import core, evaluation, offline, specs  # none of them imports TensorFlow


def teacher_rollouts(config: BCConfig, environment_factory: core.MakeEnvironment,
                     seed: int) -> Tuple[core.OfflineDataset, List[float]]:
    """``teacher_episodes`` teacher episodes, noised (``rollout_noise``): (observation, greedy action) rows, returns.

    Loaded as ``rlplat eval`` loads a run (``rlplat.evaluation``): builder, policy alone, greedy actor.
    """
    run = evaluation.read_run(config.teacher_logdir)
    step, prefix = run.checkpoint(config.teacher_checkpoint)
    teacher, environment = evaluation.make_builder(run), environment_factory(seed)
    try:
        spec = specs.make_environment_spec(environment)
        source = evaluation.restore_policy(teacher, spec, prefix, step)
        actor = teacher.make_actor(spec, source, None, 0, seed, evaluation=True)
        return offline.record_episodes(environment, actor, config.teacher_episodes, config.rollout_noise, seed)
    finally:
        environment.close()


@dataclasses.dataclass(frozen=True)
class BCBuilder(core.OfflineBuilder):
    """BC's data set, input pipeline, learner and greedy actor, from a ``BCConfig``."""

    config: BCConfig

    def make_dataset(self, environment_factory: core.MakeEnvironment, seed: int) -> core.OfflineDataset:
        return teacher_rollouts(self.config, environment_factory, seed)[0]

    def make_input_fn(self, dataset: core.OfflineDataset, seed: int) -> core.InputFn:
        return offline.make_input_fn(dataset, self.config.global_batch_size, seed)

    def make_learner(self, environment_spec: Any, replicator: Any, dataset: core.OfflineDataset,
                     seed: int) -> core.Learner:
        from rlplat_agents.bc.learning import BCLearner  # pylint: disable=g-import-not-at-top

        return BCLearner(self.config, environment_spec, replicator,
                         replicator.distribute(self.make_input_fn(dataset, seed)))

    def make_actor(self, environment_spec: Any, variable_source: core.VariableSource, seed: int) -> core.Actor:
        from rlplat_agents.d4pg.networks import policy_template  # pylint: disable=g-import-not-at-top
        from rlplat.gaussian_actor import GaussianActor  # pylint: disable=g-import-not-at-top

        return GaussianActor(policy_template(environment_spec, self.config.layer_sizes), variable_source,
                             seed=seed, evaluation=True)
