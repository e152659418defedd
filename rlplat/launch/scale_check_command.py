"""``rlplat scale-check <agent>``: does running wider change learning per env step?

    rlplat scale-check d4pg --env cartpole:swingup --actors 1,4 --seeds 3 --max-actor-steps 150000

Runs the same config at two scales, ``a`` and ``b`` (``--actors A,B``, and
optionally ``--envs-per-actor`` and ``--replay-shards`` as pairs too), over
``--seeds`` seeds each, as trials on Ray Tune (``rlplat sweep``'s trials:
every flag of ``rlplat train <agent>`` applies to each). The agent's config,
samples-per-insert included, is the same at both scales.

Then it compares the learning curves against env steps (``rlplat.scale_check``):
each run's mean evaluation return over the env steps every run covers, the
difference b - a with a bootstrap interval over seeds, and a verdict against
``--margin`` (a fraction of a's mean). Into the directory go the trials,
``summary.md`` (per trial, and the verdict), ``scale_check.json`` and
``curves.png``. Exit 0 only when the verdict is "equivalent".
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from typing import List, Optional, Sequence

from rlplat.agent_spec import AgentSpec
from rlplat.launch import common, sweep_command

NAME = "scale-check"
HELP = "run one config at two scales (e.g. 1 and 4 actors) over seeds and test that learning per env step is the same"
RESULT_JSON = "scale_check.json"

# The scale knobs: flag, where argparse keeps it, the run field it sets.
SCALES = (("actors", "actors", "num_actors"),
          ("envs-per-actor", "scale_envs_per_actor", "envs_per_actor"),
          ("replay-shards", "scale_replay_shards", "num_replay_shards"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # "resolve": --envs-per-actor here takes a pair, replacing train's flag of one value.
    for spec, sub in sweep_command.add_trial_subparsers(
            parser, "scale-check", "{agent} at two scales over seeds, compared per env step.",
            "first seed; --seeds N runs seeds SEED .. SEED+N-1 at each scale (default: 0)",
            conflict_handler="resolve"):
        envs_per_actor = sub.get_default("envs_per_actor")  # the replaced flag's default stays the default
        group = sub.add_argument_group("scale check")
        group.add_argument("--actors", required=True, type=_pair, metavar="A,B",
                           help="actor processes at scale a and at scale b, e.g. 1,4")
        group.add_argument("--envs-per-actor", dest="scale_envs_per_actor", type=_pair, default=None,
                           metavar="A,B", help="environments per actor at a and b (default: 1,1)")
        group.add_argument("--replay-shards", dest="scale_replay_shards", type=_pair, default=None,
                           metavar="A,B", help="replay shards at a and b (default: 1,1)")
        for flag, pair_flag in (("--num-actors", "--actors"), ("--num-replay-shards", "--replay-shards")):
            group.add_argument(flag, dest=f"refused_{flag[2:].replace('-', '_')}", default=None,
                               metavar="N", help=f"not used here: give both scales with {pair_flag} A,B")
        group.add_argument("--seeds", type=int, default=3, metavar="N",
                           help="seeds at each scale (default: 3)")
        group.add_argument("--margin", type=float, default=0.1, metavar="FRACTION",
                           help="the largest difference that still counts as the same learning, as a "
                                "fraction of scale a's mean return over the run (default: 0.1)")
        sub.set_defaults(run=functools.partial(run, spec), grid=[], envs_per_actor=envs_per_actor,
                         num_actors=None, num_replay_shards=1)


def _pair(text: str) -> List[int]:
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected two whole numbers A,B like 1,4, got {text!r}")
    return [int(p) for p in parts]


def run(spec: AgentSpec, args: argparse.Namespace) -> int:
    """Both scales' trials checked as ``rlplat train`` checks them, run on Tune, then compared."""
    from rlplat import scale_check  # pylint: disable=g-import-not-at-top  (NumPy only)

    sweep_command.check_sweep_flags(args)
    for flag, pair_flag in (("num_actors", "actors"), ("num_replay_shards", "replay-shards")):
        if getattr(args, f"refused_{flag}") is not None:
            raise common.UsageError(f"--{flag.replace('_', '-')} is one scale; give both with --{pair_flag} A,B")
    if not 0.0 < args.margin < 1.0:
        raise common.UsageError(f"--margin must be a fraction in (0, 1) (got {args.margin:g}), e.g. 0.1")
    if args.seeds < 2:
        raise common.UsageError(f"--seeds must be >= 2 (got {args.seeds}): the interval comes from the spread "
                                "over seeds")
    scales = _scales(args)
    if scales[0] == scales[1]:
        raise common.UsageError(f"scale a and scale b are the same ({_label(scales[0])}); give two "
                                "different --actors (or --envs-per-actor, --replay-shards)")
    sweep_dir = sweep_command.new_sweep_dir(args, spec, "scale-check")
    prepared = []
    for name, values in zip("ab", scales):
        overrides = {field: str(value) for field, value in values.items()}
        for seed in range(args.seed, args.seed + args.seeds):
            try:
                prepared.append(sweep_command.prepare_trial(spec, args, sweep_dir, values, overrides, seed,
                                                            prepared))
            except common.UsageError as e:
                raise common.UsageError(f"at scale {name} ({_label(values)}): {e}") from None
    cpus = max(sweep_command.trial_cpus(args, values["num_actors"]) for values in scales)
    code = sweep_command.run_trials(args, spec, sweep_dir, prepared, cpus)
    if code != common.EXIT_OK:
        return code
    logdirs = [[run.logdir for run, _ in prepared[i * args.seeds:(i + 1) * args.seeds]] for i in range(2)]
    try:
        comparison = compare_runs(logdirs[0], logdirs[1], _label(scales[0]), _label(scales[1]), args.margin)
    except (scale_check.ScaleCheckError, ValueError) as e:
        raise common.UsageError(f"cannot compare the scales: {e}") from None
    write_result(sweep_dir, comparison, logdirs)
    print(f"scale-check: {comparison.describe()}", flush=True)
    return common.EXIT_OK if comparison.verdict == scale_check.EQUIVALENT else common.EXIT_FAILURE


def _scales(args: argparse.Namespace) -> List[dict]:
    """The run fields at scale a and at scale b."""
    scales: List[dict] = [{}, {}]
    for flag, dest, field in SCALES:
        pair: Optional[Sequence[int]] = getattr(args, dest)
        if pair is None:
            continue
        for i, value in enumerate(pair):
            if value < 1:
                raise common.UsageError(f"--{flag} values must be >= 1 (got {pair[0]},{pair[1]})")
            scales[i][field] = value
    return scales


def _label(values: dict) -> str:
    return ", ".join(f"{field}={value}" for field, value in values.items())


def compare_runs(logdirs_a: Sequence[str], logdirs_b: Sequence[str], label_a: str, label_b: str,
                 margin: float):
    """``scale_check.compare`` of two groups of run directories' eval curves against env steps."""
    from rlplat import scale_check  # pylint: disable=g-import-not-at-top
    from rlplat.utils import curves  # pylint: disable=g-import-not-at-top

    def curves_of(logdirs):
        return [curves.points(curves.load_run(path), "eval_return", "env_steps") for path in logdirs]

    return scale_check.compare(curves_of(logdirs_a), curves_of(logdirs_b), label_a=label_a,
                               label_b=label_b, margin=margin)


def write_result(directory: str, comparison, logdirs: Sequence[Sequence[str]]) -> None:
    """``scale_check.json`` and the verdict under the trial table in ``summary.md``."""
    with open(os.path.join(directory, RESULT_JSON), "w") as f:
        json.dump({**comparison.to_dict(), "runs_a": list(logdirs[0]), "runs_b": list(logdirs[1])}, f, indent=1)
    with open(os.path.join(directory, "summary.md"), "a") as f:
        f.write(f"\n**Scale check**: {comparison.describe()}\n")
