"""``rlplat sweep <agent>``: seeds and a grid of config values, trials run concurrently on Ray Tune.

    rlplat sweep d4pg --env cartpole:swingup --seeds 3 --grid sigma=0.2,0.3 --max-actor-steps 200000

Takes every flag of ``rlplat train <agent>`` (they apply to each trial),
plus ``--seeds N`` (seeds ``--seed`` .. ``--seed``+N-1) and any number of
``--grid FIELD=V1,V2,...`` over the agent's config flags. Trials are the
product of the grid and the seeds; each is an ordinary run directory
``<sweep dir>/<field=value,...>-seed<S>`` (``rlplat status``, ``plot``,
``eval`` work on it). Every trial's flags are checked before Ray starts, as
``rlplat train`` checks them. Each trial asks for ``--learner-cpus``
(default 1) plus ``--actor-cpus`` (default 0.5) per actor; a trial that does
not fit the cluster's CPUs is refused at start, and as many trials run at
once as fit. At the end, ``summary.md``/``summary.csv`` (per trial: seed,
overrides, final and best eval return, env steps to ``--target-eval-return``)
and ``curves.png`` (mean and min-max band per config, as ``rlplat plot``)
are written into the sweep directory.

Built on Ray Tune (``rlplat.runners.sweep``): it brings trial
scheduling, concurrency limits and failure reports. Tune's search
algorithms and early-stopping schedulers are not used: a trial reports once,
at its end, because each trial is a whole distributed run with its own
controller.
"""

from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import datetime
import functools
import itertools
import os
import re
import sys
from typing import Any, Dict, List, Sequence, Tuple

from rlplat.agent_spec import AgentSpec
from rlplat.launch import agent_command
from rlplat.launch import common
from rlplat.launch import pbt_flags

NAME = "sweep"
HELP = "run seeds and a grid of config values as concurrent trials on Ray Tune"
DEFAULT_LEARNER_CPUS = 1.0
DEFAULT_ACTOR_CPUS = 0.5


def add_trial_subparsers(parser: argparse.ArgumentParser, kind: str, description: str, seed_help: str,
                         **parser_options: Any) -> List[Tuple[AgentSpec, argparse.ArgumentParser]]:
    """One sub-parser per Ray agent, with every ``rlplat train`` flag read as a set of trials' flags.

    ``kind`` names the command's directory (``runs/<kind>-<agent>-<timestamp>``);
    ``description`` is formatted with ``{agent}``.
    """
    subs = parser.add_subparsers(title="agents", dest="agent", required=True, parser_class=common.Parser)
    try:
        specs = {name: spec for name, spec in agent_command.agents().items() if spec.on_ray}
    except common.UsageError as e:
        common.fail(str(e))
    made = []
    for spec in specs.values():
        sub = subs.add_parser(spec.name, help=f"{kind} {spec.name}", description=description.format(agent=spec.name),
                              **parser_options)
        agent_command.add_arguments(sub, spec)
        for action in sub._actions:  # pylint: disable=protected-access  (the shared flags' meaning for trials)
            if action.dest == "logdir":
                action.help = (f"{kind} directory, one run directory per trial inside (default: "
                               f"runs/{kind}-{spec.name}-<timestamp>)")
            elif action.dest == "seed":
                action.help = seed_help
        made.append((spec, sub))
    return made


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for spec, sub in add_trial_subparsers(parser, "sweep", "Seeds and a grid of {agent} config values on Ray Tune.",
                                          "first seed; --seeds N runs seeds SEED .. SEED+N-1 (default: 0)"):
        sweep = sub.add_argument_group("sweep")
        sweep.add_argument("--seeds", type=int, default=1, metavar="N",
                           help="seeds per grid point: --seed, --seed+1, ... (default: 1)")
        sweep.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2",
                           help="config values to try, e.g. sigma=0.2,0.3 or critic-layer-sizes=64:64,"
                                "128:128 (list values use ':'); repeat for a product")
        pbt_flags.add_flags(sweep)
        sub.set_defaults(run=functools.partial(run, spec))


def _parse_grid(entries: Sequence[str], spec: AgentSpec) -> List[Tuple[str, List[str]]]:
    grid = []
    for entry in entries:
        field, sep, values = entry.partition("=")
        field = field.strip().lstrip("-").replace("-", "_")
        if not sep or not values.strip():
            raise common.UsageError(f"--grid {entry!r}: use FIELD=V1,V2 (e.g. --grid sigma=0.2,0.3)")
        if field not in spec.flag_helps():
            known = ", ".join(sorted(spec.flag_helps()))
            raise common.UsageError(f"--grid {entry!r}: {field} is not a {spec.name} config flag; "
                                    f"use one of: {known}")
        if any(f == field for f, _ in grid):
            raise common.UsageError(f"--grid names {field} twice; give all its values in one --grid")
        texts = [v.strip().replace(":", ",") for v in values.split(",") if v.strip()]
        typed: Dict[Any, str] = {}
        for text in texts:
            value = typed_value(spec, field, text)
            key = tuple(value) if isinstance(value, list) else value
            if key in typed:
                raise common.UsageError(f"--grid {entry!r}: {typed[key]} and {text} are the same value of "
                                        f"{field}, so two trials would share one run directory; give each "
                                        "value once")
            typed[key] = text
        grid.append((field, texts))
    return grid


def typed_value(spec: AgentSpec, field: str, text: str) -> Any:
    """``text`` as the agent's own ``--field`` flag would parse it."""
    return common.config_value(spec.config_class, field, text, f"rlplat sweep {spec.name} --grid")


def _trial_name(overrides: Dict[str, str], seed: int) -> str:
    parts = [f"{k}={v}" for k, v in overrides.items()]
    return re.sub(r"[^A-Za-z0-9=.,_-]", "_", ",".join(parts + [f"seed{seed}"]))


def run(spec: AgentSpec, args: argparse.Namespace) -> int:
    """Every trial checked as ``rlplat train`` checks it, then the trials on Ray Tune; the exit code."""
    check_sweep_flags(args)
    grid = _parse_grid(args.grid, spec)
    mutations = pbt_flags.parse(args, spec, [f for f, _ in grid])
    if mutations and spec.replay_checkpoint:
        args.replay_checkpoint = True  # an exploit copies the donor's replay with its weights
    sweep_dir = new_sweep_dir(args, spec, "sweep")
    prepared = []
    for values in itertools.product(*[vs for _, vs in grid]) if grid else [()]:
        overrides = dict(zip([f for f, _ in grid], values))
        typed = {field: typed_value(spec, field, text) for field, text in overrides.items()}
        for seed in range(args.seed, args.seed + args.seeds):
            prepared.append(prepare_trial(spec, args, sweep_dir, typed, overrides, seed, prepared))
    return run_trials(args, spec, sweep_dir, prepared, trial_cpus(args, args.num_actors), mutations)


def check_sweep_flags(args: argparse.Namespace) -> None:
    """``--seeds`` and ``--resume``, which a set of trials reads differently from one run."""
    if args.seeds < 1:
        raise common.UsageError(f"--seeds must be >= 1 (got {args.seeds})")
    if args.resume:
        raise common.UsageError(f"rlplat {getattr(args, 'command', 'sweep')} does not resume; resume a trial with "
                                "`rlplat train <agent> --resume --logdir <sweep dir>/<trial>`")


def new_sweep_dir(args: argparse.Namespace, spec: AgentSpec, kind: str) -> str:
    """``--logdir`` (or ``runs/<kind>-<agent>-<timestamp>``), which must be new or empty."""
    sweep_dir = os.path.abspath(args.logdir or os.path.join(
        "runs", f"{kind}-{spec.name}-{datetime.datetime.now():%Y%m%d-%H%M%S}"))
    if os.path.lexists(sweep_dir) and not os.path.isdir(sweep_dir):
        raise common.UsageError(f"--logdir {sweep_dir} is a file, not a directory; name a new {kind} directory")
    if os.path.isdir(sweep_dir) and os.listdir(sweep_dir):
        raise common.UsageError(f"--logdir {sweep_dir} is not empty; name a new {kind} directory")
    return sweep_dir


def trial_cpus(args: argparse.Namespace, num_actors: int) -> float:
    """CPUs one trial asks Ray for: its learner workers and ``num_actors`` actors."""
    return _learner_cpus(args) * args.num_learner_workers + _actor_cpus(args) * num_actors


def _learner_cpus(args: argparse.Namespace) -> float:
    return args.learner_cpus if args.learner_cpus is not None else DEFAULT_LEARNER_CPUS


def _actor_cpus(args: argparse.Namespace) -> float:
    return args.actor_cpus if args.actor_cpus is not None else DEFAULT_ACTOR_CPUS


def prepare_trial(spec: AgentSpec, args: argparse.Namespace, sweep_dir: str, values: Dict[str, Any],
                  overrides: Dict[str, str], seed: int, prepared: Sequence[Tuple[Any, Dict[str, str]]]):
    """One trial's flags (``args`` with ``values`` set), checked as ``rlplat train`` checks them.

    Returns ``(PreparedRun, overrides)``; ``overrides`` (the values as typed)
    name the trial's run directory, which no earlier trial in ``prepared`` may share.
    """
    trial = copy.copy(args)
    for field, value in values.items():
        setattr(trial, field, value)
    trial.seed = seed
    trial.learner_cpus, trial.actor_cpus = _learner_cpus(args), _actor_cpus(args)
    trial.logdir = os.path.join(sweep_dir, _trial_name(overrides, seed))
    run = agent_command.prepare(spec, trial)
    if any(run.logdir == other.logdir for other, _ in prepared):
        raise common.UsageError(f"--grid: two trials would share {run.logdir}; give values that "
                                "differ in more than punctuation")
    return run, overrides


def _on_this_instance(layout, local: bool):
    """A trial's layout on the Ray instance this command started (``local``): an ordinary local run's.

    Inside its Tune worker a trial joins that instance rather than starting
    one, and a joined instance counts as a cluster (replay in a process of its
    own, which imports TensorFlow: about 4 CPU-s more per trial). On this
    command's own local instance every process is on this host, so replay goes
    inside the learner as in a single local run, unless the layout says
    otherwise or needs a separate server (replay shards, a learner group).
    """
    if (not local or layout.colocate_replay is not None or layout.num_replay_shards > 1
            or layout.num_learner_workers > 1):
        return layout
    return dataclasses.replace(layout, colocate_replay=True)


def run_trials(args, spec: AgentSpec, sweep_dir: str, prepared, cpus_per_trial: float,
               mutations: Sequence[Any] = ()) -> int:
    """Runs the prepared trials on Ray Tune, as many at once as fit, then writes the summary.

    With ``mutations`` they are a PBT population (``rlplat.runners.pbt``), which runs all at once.
    """
    from rlplat.distributed import cluster  # pylint: disable=g-import-not-at-top
    from rlplat.runners import sweep  # pylint: disable=g-import-not-at-top

    os.makedirs(sweep_dir, exist_ok=True)
    try:
        connection = cluster.connect(args.address, allow_unauthenticated=args.allow_unauthenticated_ray)
    except (cluster.ClusterConnectionError, ValueError) as e:
        raise common.UsageError(str(e)) from None
    try:
        total = cluster.total_cpus()
        concurrent = int((total + 1e-9) // (cpus_per_trial + sweep.DRIVER_CPUS))
        if concurrent < 1:
            raise common.UsageError(
                f"a trial needs {cpus_per_trial:g} CPUs (--learner-cpus x --num-learner-workers + "
                f"--actor-cpus x --num-actors) but the Ray cluster has {total:g}; lower "
                "--actor-cpus/--learner-cpus or --num-actors")
        if mutations and concurrent < len(prepared):
            raise common.UsageError(
                f"--scheduler pbt runs the whole population at once: {len(prepared)} trials of "
                f"{cpus_per_trial:g} CPUs, but the Ray cluster has {total:g}; lower --learner-cpus/--actor-cpus, "
                "--num-actors or --seeds")
        specs = [sweep.TrialSpec(name=os.path.basename(run.logdir), experiment=run.experiment,
                                 layout=_on_this_instance(run.layout, connection.local), overrides=overrides)
                 for run, overrides in prepared]
        kind = getattr(args, "command", "sweep")
        print(f"{kind} in {sweep_dir}: {len(specs)} trial(s) of {spec.name} on {args.env}, up to "
              f"{cpus_per_trial:g} CPUs each, {min(concurrent, len(specs))} at once on {total:g} CPUs",
              flush=True)
        if mutations:
            from rlplat.runners import pbt  # pylint: disable=g-import-not-at-top

            results = pbt.run_population(specs, sweep_dir, mutations, args.perturbation_interval, seed=args.seed)
        else:
            results = sweep.run_trials(specs, sweep_dir, concurrent)
    finally:
        cluster.disconnect(connection)
    return _summarise(args, sweep_dir, specs, results, [m.field for m in mutations])


def _summarise(args, sweep_dir: str, specs, results, mutated: Sequence[str] = ()) -> int:
    from rlplat.launch import plot_command  # pylint: disable=g-import-not-at-top
    from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top

    errors = {r["name"]: r["error"] for r in results}
    rows = []
    for spec in specs:
        evals = [r for r in loggers.read_jsonl(os.path.join(spec.logdir, loggers.JSONL_NAME), "evaluator")
                 if "eval_return" in r]
        target = args.target_eval_return
        reached = next((r["step"] for r in evals if target is not None and r["eval_return"] >= target), None)
        last = [r["eval_return"] for r in evals[-3:]]
        final = _final_config(spec.logdir) if mutated else {}
        rows.append({"trial": spec.name, "seed": spec.seed,
                     **{k: str(v) for k, v in spec.overrides.items()},
                     **{f"final {k}": _shown_value(final.get(k)) for k in mutated},
                     "env_steps": evals[-1]["step"] if evals else None,
                     "final_return": round(sum(last) / len(last), 2) if last else None,
                     "best_return": round(max(r["eval_return"] for r in evals), 2) if evals else None,
                     "steps_to_target": reached,
                     "error": (errors.get(spec.name) or "").splitlines()[0][:120] if errors.get(spec.name) else ""})
    columns = list(rows[0])
    with open(os.path.join(sweep_dir, "summary.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    shown = lambda v: "-" if v is None or v == "" else str(v)  # noqa: E731
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(shown(r[c]) for c in columns) + " |" for r in rows]
    if mutated:
        lines += pbt_flags.lineage_markdown(sweep_dir)
    with open(os.path.join(sweep_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    done = [s.logdir for s in specs if not errors.get(s.name)]
    if done:
        plot_command.run(argparse.Namespace(runs=done, metric="eval_return", x="env_steps",
                                            output=os.path.join(sweep_dir, "curves.png"),
                                            csv=os.path.join(sweep_dir, "curves.csv")))
    failed = [name for name, error in errors.items() if error]
    if failed:
        sys.stderr.write(f"rlplat: error: {len(failed)} of {len(specs)} trial(s) failed ({', '.join(failed)}); "
                         f"see {os.path.join(sweep_dir, 'summary.md')}\n")
        return common.EXIT_FAILURE
    print(f"summary: {os.path.join(sweep_dir, 'summary.md')}, curves: {os.path.join(sweep_dir, 'curves.png')}",
          flush=True)
    return common.EXIT_OK


def _final_config(logdir: str) -> Dict[str, Any]:
    """The agent config a trial ended with (a PBT trial's may differ from where it started)."""
    from rlplat import run_dir  # pylint: disable=g-import-not-at-top

    try:
        return dict(run_dir.read_json_object(run_dir.config_path(logdir), "run config").get("agent", {}))
    except run_dir.RunDirError:
        return {}


def _shown_value(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
