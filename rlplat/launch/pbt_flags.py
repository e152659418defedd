"""``rlplat sweep --scheduler pbt``: the flags of population-based training and their checks.

    rlplat sweep d4pg --scheduler pbt --seeds 4 --mutate sigma=0.1:0.5 \\
        --mutate critic-learning-rate=1e-5:1e-3 --perturbation-interval 20000 --eval-every-steps 10000

The population is the sweep's trials (the grid times ``--seeds``). Every
``--perturbation-interval`` env steps, the bottom quarter of the population
copies a top trial's run (weights, optimizer state, replay) and perturbs the
``--mutate`` fields (``rlplat.runners.pbt``). Everything is checked here,
before Ray: each field must be a config flag that a resume may change, and
every value of its range must pass the agent's config checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any, List, Sequence

from rlplat.agent_spec import AgentSpec, RunFacts
from rlplat.launch import common


def add_flags(group: argparse._ArgumentGroup) -> None:  # pylint: disable=protected-access
    group.add_argument("--scheduler", choices=("grid", "pbt"), default="grid",
                       help="grid: every trial runs its own config to the end (default); pbt: population-"
                            "based training over the --mutate fields, the trials being the population")
    group.add_argument("--mutate", action="append", default=[], metavar="FIELD=LOW:HIGH|V1,V2",
                       help="with --scheduler pbt: a config field PBT may change, over a range (sigma=0.1:0.5; "
                            "a range over a decade or more is searched on a log scale) or a list of values; "
                            "repeat for more fields")
    group.add_argument("--perturbation-interval", type=int, default=None, metavar="STEPS",
                       help="with --scheduler pbt: env steps between PBT's decisions (each trial's latest "
                            "evaluation decides; pass --eval-every-steps at most this)")


def parse(args: argparse.Namespace, spec: AgentSpec, grid_fields: Sequence[str]) -> List[Any]:
    """The ``rlplat.runners.pbt.Mutation`` list of ``--mutate`` (``[]`` for a grid sweep), all checked.

    Raises:
      common.UsageError: one line naming the flag and the fix.
    """
    from rlplat.runners.pbt_space import Mutation  # pylint: disable=g-import-not-at-top  (no Ray)

    if args.scheduler != "pbt":
        for flag, given in (("--mutate", args.mutate), ("--perturbation-interval", args.perturbation_interval)):
            if given:
                raise common.UsageError(f"{flag} is for --scheduler pbt; add it, or drop {flag}")
        return []
    if not args.mutate:
        raise common.UsageError("--scheduler pbt needs at least one --mutate FIELD=LOW:HIGH (or FIELD=V1,V2)")
    interval = args.perturbation_interval
    if interval is None or interval < 1:
        raise common.UsageError("--scheduler pbt needs --perturbation-interval STEPS >= 1 (env steps between "
                                "PBT's decisions)")
    if args.max_actor_steps is None:
        raise common.UsageError("--scheduler pbt needs --max-actor-steps: every trial trains to that budget, "
                                "in segments of --perturbation-interval")
    if interval >= args.max_actor_steps:
        raise common.UsageError(f"--perturbation-interval {interval} leaves no decision before "
                                f"--max-actor-steps {args.max_actor_steps}; make it smaller")
    if args.eval_every_steps is None or args.eval_every_steps > interval:
        raise common.UsageError(f"--scheduler pbt compares trials by their latest evaluation: pass "
                                f"--eval-every-steps at most --perturbation-interval {interval}")
    population = args.seeds * _grid_size(args)
    if population < 2:
        raise common.UsageError("--scheduler pbt needs a population of 2 or more trials: pass --seeds 4 "
                                "(or a --grid)")
    base = common.config_from_args(spec.config_class, args, spec.flag_helps())
    fixed = set(spec.shapes(base)) | set(spec.replay_fields)
    facts = RunFacts(env=args.env, num_actors=args.num_actors, envs_per_actor=args.envs_per_actor)
    mutations: List[Any] = []
    for entry in args.mutate:
        name, sep, text = entry.partition("=")
        field = name.strip().lstrip("-").replace("-", "_")
        if not sep or not text.strip():
            raise common.UsageError(f"--mutate {entry!r}: use FIELD=LOW:HIGH or FIELD=V1,V2")
        if field not in spec.flag_helps():
            raise common.UsageError(f"--mutate {entry!r}: {field} is not a {spec.name} config flag; use one of: "
                                    f"{', '.join(sorted(spec.flag_helps()))}")
        if field in fixed:
            raise common.UsageError(f"--mutate {field}: a PBT trial resumes a copied run, and a resume may not "
                                    f"change {field} (it fixes the network's shapes or the replay table)")
        if field in grid_fields or any(m.field == field for m in mutations):
            raise common.UsageError(f"--mutate names {field} twice (or also in --grid); give it once")
        default = getattr(base, field)
        if isinstance(default, (bool, str, tuple, list)) or default is None:
            if ":" in text:
                raise common.UsageError(f"--mutate {field}: a range needs a numeric field; list values "
                                        "instead, e.g. FIELD=V1,V2")
        try:
            if ":" in text:
                low_text, _, high_text = text.partition(":")
                low = _value(spec, field, low_text.strip())
                high = _value(spec, field, high_text.strip())
                mutation = Mutation(field, low=low, high=high)
                values = [low, high]
            else:
                values = [_value(spec, field, v.strip()) for v in text.split(",") if v.strip()]
                if len(values) < 2:
                    raise ValueError(f"give two or more values (got {text!r})")
                mutation = Mutation(field, values=tuple(values))
        except ValueError as e:
            raise common.UsageError(f"--mutate {entry!r}: {e}") from None
        for value in values:  # the range's ends and every listed value pass the agent's own checks
            try:
                spec.checked(dataclasses.replace(base, **{field: value}), facts)
            except ValueError as e:
                raise common.UsageError(f"--mutate {entry!r}: {common.as_flags(str(e), spec.flag_helps())}") from None
        mutations.append(mutation)
    return mutations


def _value(spec: AgentSpec, field: str, text: str) -> Any:
    return common.config_value(spec.config_class, field, text, f"rlplat sweep {spec.name} --mutate")


def _grid_size(args: argparse.Namespace) -> int:
    size = 1
    for entry in args.grid:
        size *= max(1, len([v for v in entry.partition("=")[2].split(",") if v.strip()]))
    return size


def lineage_markdown(sweep_dir: str) -> List[str]:
    """The sweep's exploits from ``lineage.jsonl``, as a markdown section (no lines when there is none)."""
    from rlplat.runners.pbt_space import LINEAGE  # pylint: disable=g-import-not-at-top

    path = os.path.join(sweep_dir, LINEAGE)
    if not os.path.exists(path):
        return ["", "**Lineage**: no trial copied another."]
    with open(path) as f:
        events = [json.loads(line) for line in f if line.strip()]
    lines = ["", "**Lineage** (PBT exploits, in order):", "",
             "| trial | copied | at env steps | changed | resumed from learner step | replay items restored |",
             "|---|---|---|---|---|---|"]
    for e in events:
        changed = "; ".join(f"{k}: {_shown(old)} -> {_shown(new)}" for k, (old, new) in e["changed"].items()) or "-"
        lines.append(f"| {e['trial']} | {e['copied']} | {e['at_env_steps']:,} | {changed} | "
                     f"{e.get('resumed_from_learner_step')} | {e.get('replay_restored_items')} |")
    return lines


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
