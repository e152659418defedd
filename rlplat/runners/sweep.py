"""Seeds and sweeps on Ray Tune: each trial is one ordinary ``run_on_ray`` run.

Tune schedules the trials (how many at once, their state, failures) and
each trial's function calls ``run_on_ray`` inside its Tune worker, which
starts that trial's own learner, replay and actors as Ray actors: trials
share nothing but the cluster. The trial's own process needs almost no CPU
(it only drives), and is pinned to this machine so its run directory lands
under the sweep directory here. The run's actors ask Ray for their CPUs as
in a single run (``RayLayoutConfig.actor_cpus``/``learner_cpus``, set by the
caller), outside Tune's placement group, and ``max_concurrent`` (from the
caller's CPU count) keeps the trials running at once within the cluster.
On the local instance ``rlplat sweep`` started itself, a trial's replay sits
inside its learner, as in a local run (``sweep_command._on_this_instance``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Sequence

import ray

from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.experiment import Experiment
from rlplat.runners.on_ray import run_on_ray

# The trial's driver: a sliver of CPU, so its own slot never blocks a run.
DRIVER_CPUS = 0.01


@dataclasses.dataclass(frozen=True)
class TrialSpec:
    """One run of the sweep: the ``Experiment`` and layout ``run_on_ray`` gets."""

    name: str
    experiment: Experiment
    layout: RayLayoutConfig
    overrides: Dict[str, Any]

    @property
    def logdir(self) -> str:
        return self.experiment.logdir

    @property
    def seed(self) -> int:
        return self.experiment.seed


def _trial(config: Dict[str, Any], trials: Sequence[TrialSpec]) -> None:
    from ray import tune  # pylint: disable=g-import-not-at-top

    spec = trials[config["trial"]]
    result = run_on_ray(spec.experiment, dataclasses.replace(spec.layout, console=False))
    tune.report({"actor_steps": result.actor_steps, "learner_steps": result.learner_steps,
                 "eval_return": result.eval_return, "stop_reason": result.stop_reason})


def run_trials(trials: Sequence[TrialSpec], sweep_dir: str, max_concurrent: int) -> List[Dict[str, Any]]:
    """Runs every trial (at most ``max_concurrent`` at once); returns ``{"name", "error"}`` per trial.

    Ray must be connected. Tune's own records go to ``<sweep_dir>/_tune``.
    """
    from ray import tune  # pylint: disable=g-import-not-at-top

    here = f"node:{ray.util.get_node_ip_address()}"
    trainable = tune.with_resources(tune.with_parameters(_trial, trials=list(trials)),
                                    tune.PlacementGroupFactory([{"CPU": DRIVER_CPUS, here: 0.001}]))
    tuner = tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(list(range(len(trials))))},
        tune_config=tune.TuneConfig(max_concurrent_trials=max(1, int(max_concurrent))),
        run_config=tune.RunConfig(name="tune", storage_path=os.path.abspath(os.path.join(sweep_dir, "_tune")),
                                  verbose=0))
    grid = tuner.fit()
    out = []
    for result in grid:
        spec = trials[result.config["trial"]]
        out.append({"name": spec.name, "error": None if result.error is None else str(result.error)})
    return sorted(out, key=lambda r: r["name"])
