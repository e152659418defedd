"""Population-based training on Ray Tune: trials that copy better trials' runs and perturb their config.

Each trial is an ordinary run directory trained in segments of
``perturbation_interval`` env steps: a segment is one ``run_on_ray`` call that
resumes the run (weights, optimizer state, counters and, with replay
checkpointing, the replay contents) and ends with a checkpoint. After each
segment the trial reports its latest evaluation to Tune with a snapshot of its
run directory as the Tune checkpoint.

Tune's ``PopulationBasedTraining`` (synchronous: every trial reaches the same
env step before any is judged) then replaces the bottom quantile: such a trial
restarts from a top trial's snapshot with a perturbed config. Here that means
its run directory is replaced by a copy of the donor's, and the next segment
resumes it under the new config (the learning rate too: see
``rlplat.utils.checkpointing``). Every exploit is one line of
``<sweep dir>/lineage.jsonl``: who copied whom, at which env step, what changed,
and what the resume restored.

The whole population runs at once (Tune pauses and restarts trials at each
boundary): the caller checks that it fits the cluster.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import tempfile
from typing import Any, Dict, List, Sequence

import ray

from rlplat import run_dir
from rlplat.runners.on_ray import run_on_ray
from rlplat.runners.pbt_space import LINEAGE, Mutation
from rlplat.runners.sweep import DRIVER_CPUS, TrialSpec

_ORIGIN = "origin.json"  # in a snapshot: whose run it is, at which env step, under which config
_RUN = "run"  # in a snapshot: the copy of the run directory
_NAME_PREFIX = "rlplat-trial-"  # Tune's name of trial i: "rlplat-trial-<i>"


def _snapshot(logdir: str, trial: str, env_steps: int, config: Dict[str, Any]) -> str:
    """A temporary folder holding a copy of ``logdir`` and its origin; the caller hands it to Tune.

    The origin names the trial, its env steps, mutated config, newest
    checkpoint and evaluations, so that an exploit's lineage can say what it took.
    """
    folder = tempfile.mkdtemp(prefix="rlplat-pbt-")
    shutil.copytree(logdir, os.path.join(folder, _RUN), ignore=shutil.ignore_patterns(run_dir.LOCK))
    steps = run_dir.checkpoint_steps(logdir)
    with open(os.path.join(folder, _ORIGIN), "w") as f:
        json.dump({"trial": trial, "env_steps": int(env_steps), "config": config,
                   "checkpoint_step": steps[-1] if steps else None, "evals": _evals(logdir)}, f)
    return folder


def _take_snapshot(folder: str, logdir: str) -> Dict[str, Any]:
    """Replaces ``logdir`` with the snapshot's run; returns the snapshot's origin."""
    with open(os.path.join(folder, _ORIGIN)) as f:
        origin = json.load(f)
    shutil.rmtree(logdir, ignore_errors=True)
    shutil.copytree(os.path.join(folder, _RUN), logdir)
    return origin


def _evals(logdir: str) -> List[List[float]]:
    """``[[env steps, mean return], ...]`` of the run's evaluations so far."""
    from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top

    return [[int(r["step"]), float(r["eval_return"])]
            for r in loggers.read_jsonl(run_dir.metrics_path(logdir), "evaluator") if "eval_return" in r]


def _clock(target: int, budget: int, interval: int) -> int:
    """PBT's time: the boundary a segment ran to; the last segment reads as the boundary before it.

    Boundaries, not measured env steps (a run overshoots its target a little),
    keep the decisions exactly ``interval`` apart; and no decision falls at
    the end of the budget, where nothing would train on its result.
    """
    return target if target < budget else ((budget - 1) // interval) * interval


def _trial(config: Dict[str, Any], trials: Sequence[TrialSpec], fields: Sequence[str], interval: int,
           sweep_dir: str) -> None:
    from ray import tune  # pylint: disable=g-import-not-at-top

    # Which trial this is comes from its name, fixed when Tune made it: an exploit copies
    # the donor's whole config, its "trial" index included.
    spec = trials[int(tune.get_context().get_trial_name().rpartition(_NAME_PREFIX)[2])]
    values = {name: config[name] for name in fields}
    logdir, budget = spec.logdir, spec.experiment.max_actor_steps
    steps, event = 0, None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            origin = _take_snapshot(folder, logdir)
        steps = origin["env_steps"]
        if origin["trial"] != spec.name:  # an exploit: another trial's run, under a perturbed config
            changed = {k: [origin["config"].get(k), v] for k, v in values.items() if origin["config"].get(k) != v}
            event = {"trial": spec.name, "copied": origin["trial"], "at_env_steps": steps,
                     "donor_config": origin["config"], "config": values, "changed": changed,
                     "donor_checkpoint_step": origin["checkpoint_step"], "donor_evals": origin["evals"]}
    builder = spec.experiment.builder
    builder = type(builder)(config=dataclasses.replace(builder.config, **values))
    while steps < budget:
        target = min(budget, (steps // interval + 1) * interval)
        experiment = dataclasses.replace(spec.experiment, builder=builder, max_actor_steps=target,
                                         resume=bool(run_dir.checkpoint_steps(logdir)) if os.path.isdir(logdir)
                                         else False)
        result = run_on_ray(experiment, dataclasses.replace(spec.layout, console=False))
        steps = int(result.actor_steps)
        if event is not None:
            info = run_dir.read_json_object(run_dir.run_info_path(logdir), "run info")
            event.update(resumed_from_learner_step=info.get("resumed_from_step"),
                         replay_restored_items=info.get("replay_restored_items"))
            with open(os.path.join(sweep_dir, LINEAGE), "a") as f:
                f.write(json.dumps(event) + "\n")
            event = None
        evals = _evals(logdir)
        eval_step, eval_return = evals[-1] if evals else (0, -math.inf)
        folder = _snapshot(logdir, spec.name, steps, values)
        try:
            tune.report({"pbt_clock": _clock(target, budget, interval), "env_steps": steps,
                         "eval_return": eval_return, "eval_env_steps": eval_step,
                         "learner_steps": int(result.learner_steps)},
                        checkpoint=tune.Checkpoint.from_directory(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if result.stop_reason != "max_actor_steps":
            break


def run_population(trials: Sequence[TrialSpec], sweep_dir: str, mutations: Sequence[Mutation], interval: int,
                   *, quantile_fraction: float = 0.25, resample_probability: float = 0.25,
                   seed: int = 0) -> List[Dict[str, Any]]:
    """Runs every trial at once under Tune's synchronous PBT; returns ``{"name", "error"}`` per trial.

    Ray must be connected, and the cluster must hold the whole population.
    Each trial starts from values drawn from ``mutations`` (seeded by ``seed``).
    """
    from ray import tune  # pylint: disable=g-import-not-at-top
    from ray.tune.schedulers import PopulationBasedTraining  # pylint: disable=g-import-not-at-top

    rng = random.Random(seed)
    by_field = {m.field: m for m in mutations}

    def explore(config: Dict[str, Any]) -> Dict[str, Any]:
        for name, mutation in by_field.items():
            config[name] = mutation.perturb(config[name], rng, resample_probability)
        return config

    # No Tune search spaces: `explore` alone perturbs, within the ranges and types given.
    scheduler = PopulationBasedTraining(
        time_attr="pbt_clock", metric="eval_return", mode="max", perturbation_interval=interval,
        hyperparam_mutations={}, quantile_fraction=quantile_fraction, custom_explore_fn=explore, synch=True)
    starts = [{name: m.sample(rng) for name, m in by_field.items()} for _ in trials]
    here = f"node:{ray.util.get_node_ip_address()}"
    trainable = tune.with_resources(
        tune.with_parameters(_trial, trials=list(trials), fields=list(by_field), interval=int(interval),
                             sweep_dir=sweep_dir),
        tune.PlacementGroupFactory([{"CPU": DRIVER_CPUS, here: 0.001}]))
    tuner = tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(list(range(len(trials)))),
                     **{name: tune.sample_from(lambda spec, name=name: starts[spec.config["trial"]][name])
                        for name in by_field}},
        tune_config=tune.TuneConfig(scheduler=scheduler,
                                    trial_name_creator=lambda trial: f"{_NAME_PREFIX}{trial.config['trial']}",
                                    trial_dirname_creator=lambda trial: f"{_NAME_PREFIX}{trial.config['trial']}"),
        run_config=tune.RunConfig(name="tune", storage_path=os.path.abspath(os.path.join(sweep_dir, "_tune")),
                                  verbose=0))
    grid = tuner.fit()
    out = []
    for result in grid:
        spec = trials[int(os.path.basename(os.path.normpath(result.path)).rpartition(_NAME_PREFIX)[2])]
        out.append({"name": spec.name, "error": None if result.error is None else str(result.error)})
    return sorted(out, key=lambda r: r["name"])
