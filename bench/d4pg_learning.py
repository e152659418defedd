"""D4PG steps-to-target on cartpole:swingup over seeds, on the real Ray layout.

Each seed runs `run_on_ray` exactly as `rlplat train d4pg` does (local Ray,
Reverb inside the learner, 2 actors, the default D4PG config unless `--set`
changes it), with greedy evaluations every `--eval-every` actor steps
(`--eval-episodes` each, logged at the step of the weights they used), and
stops at the first evaluation that reaches `--target` or at
`--max-actor-steps`. Seeds run one after another; each seed's record is kept
in results/runs/ and reused by a later call with the same settings and whole config, so an
interrupted sweep resumes.

    python bench/d4pg_learning.py --seeds 3 [--variant NAME --set dqda_clip_norm=0 ...]
        [--target 800] [--max-actor-steps 200000] [--eval-every 5000] [--eval-episodes 5]

Writes d4pg_learning.json (per variant: settings, summary, the seeds' curves)
and d4pg_learning.png (mean and min-max band over seeds, against env steps and
wall time) from every variant recorded in results/runs/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import seeds as seeds_lib  # noqa: E402

BENCH = "d4pg_learning"


def _parse_sets(pairs):
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top  (no TF)

    return seeds_lib.parse_overrides(D4PGConfig, pairs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cartpole:swingup")
    parser.add_argument("--target", type=lambda t: None if t == "none" else float(t), default=800.0,
                        help="eval return that ends a run; 'none' runs to --max-actor-steps")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--max-actor-steps", type=int, default=200_000)
    parser.add_argument("--eval-every", type=int, default=5_000, help="actor steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--weight-publish-period", type=int, default=1, metavar="STEPS",
                        help="learner steps between published policy versions (RayLayoutConfig)")
    parser.add_argument("--precisions", default=None, metavar="A,B",
                        help="compare learner precisions in one run (e.g. fp32,auto): variants "
                             "precision_A and precision_B, seeds interleaved A B, B A, ... so that machine "
                             "load falls on both alike; the report gives B's median seconds to the target "
                             "over A's")
    seeds_lib.add_sweep_arguments(parser, "D4PGConfig",
                                  os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    overrides = _parse_sets(args.set)
    settings = {"env": args.env, "target": args.target, "num_actors": args.num_actors,
                "max_actor_steps": args.max_actor_steps, "eval_every": args.eval_every,
                "eval_episodes": args.eval_episodes, "overrides": overrides}
    if args.weight_publish_period != 1:  # older records, all at 1, lack the key
        settings["weight_publish_period"] = args.weight_publish_period
    if args.precisions and not args.report_only:
        return _compare_precisions(args, overrides, settings)
    if not args.report_only:
        seed_list = seeds_lib.seed_list(args)
        records = seeds_lib.run_seeds(args.out, BENCH, args.variant, seed_list, settings,
                                      lambda seed: run_one(args, overrides, seed), reuse=not args.no_reuse,
                                      config=whole_config(overrides))
        summary = seeds_lib.summarise(records, args.target, args.max_actor_steps)
        print(seeds_lib.summary_line(f"D4PG {args.env} [{args.variant}]", summary), flush=True)
    return write_report(args.out)


def _compare_precisions(args, overrides, settings):
    """Runs each seed at every precision of ``--precisions``, alternating which goes first."""
    from rlplat import precision as precision_lib  # pylint: disable=g-import-not-at-top  (no TF)

    names = [p.strip() for p in args.precisions.split(",") if p.strip()]
    if len(names) != 2 or any(p not in precision_lib.PRECISIONS for p in names) or names[0] == names[1]:
        raise SystemExit(f"--precisions {args.precisions!r}: give two of {', '.join(precision_lib.PRECISIONS)}, "
                         "e.g. fp32,auto")
    if "precision" in overrides:
        raise SystemExit("--precisions sets precision itself; drop --set precision=...")
    for i, seed in enumerate(seeds_lib.seed_list(args)):
        for name in (names if i % 2 == 0 else names[::-1]):
            chosen = dict(overrides, precision=name)
            variant = f"precision_{name}"
            run_args = argparse.Namespace(**dict(vars(args), variant=variant))
            seeds_lib.run_seeds(args.out, BENCH, variant, [seed], dict(settings, overrides=chosen),
                                lambda s, chosen=chosen, run_args=run_args: run_one(run_args, chosen, s),
                                reuse=not args.no_reuse, config=whole_config(chosen))
    return write_report(args.out)


def whole_config(overrides: Dict[str, Any]) -> Dict[str, Any]:
    """The config a run with ``overrides`` gets today: a record made under other defaults is not reused."""
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top  (no TF)

    return D4PGConfig(**overrides).to_dict()


def precision_ratio(report, a="precision_fp32", b="precision_auto"):
    """B's median seconds to the target over A's (None unless both variants reached it)."""
    variants = report["variants"]
    if a not in variants or b not in variants:
        return None
    seconds = [variants[v]["summary"]["median_seconds_to_target"] for v in (a, b)]
    if None in seconds or not seconds[0]:
        return None
    return {"over": a, "variant": b, "median_seconds": seconds, "ratio": seconds[1] / seconds[0]}


def run_one(args, overrides, seed, bench=BENCH):
    """One training run to the target (or the budget); its eval curve and rates.

    ``args`` needs ``env``, ``variant``, ``num_actors``, ``max_actor_steps``,
    ``eval_every``, ``eval_episodes`` and ``target`` (None: run the budget).
    """
    from rlplat_agents.d4pg.builder import D4PGBuilder  # pylint: disable=g-import-not-at-top
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top
    from rlplat.runners import Experiment, RayLayoutConfig, run_on_ray  # pylint: disable=g-import-not-at-top
    from rlplat.runners.local import LocalLayout, run_local  # pylint: disable=g-import-not-at-top

    logdir = tempfile.mkdtemp(prefix=f"{bench}_s{seed}_")
    config = D4PGConfig(**overrides)
    print(f"[{bench}/{args.variant}] seed {seed}: logdir {logdir}", flush=True)
    start = time.time()
    experiment = Experiment(D4PGBuilder(config=config), args.env, num_actors=args.num_actors,
                            max_actor_steps=args.max_actor_steps, logdir=logdir, seed=seed,
                            eval_every_actor_steps=args.eval_every, eval_episodes=args.eval_episodes,
                            target_eval_return=args.target, checkpoint_every_s=3600.0)
    if getattr(args, "runner", "ray") == "local":
        # One process, actors and learner taking turns: one learner call
        # (steps_per_call batches) per its worth of inserts, as a single-process
        # reference interleaves them, with no Ray, no parallel actors and no rate limiter.
        summary = run_local(experiment, LocalLayout.one_learner_call_per_chunk(experiment.builder,
                                                                               report_every_s=None))
    else:
        summary = run_on_ray(experiment, RayLayoutConfig(
            console=False, weight_publish_period=getattr(args, "weight_publish_period", 1)))
    wall_s = time.time() - start
    records = seeds_lib.read_metrics(logdir)
    curve = seeds_lib.eval_curve(records, start)
    lags = [r["policy_lag"] for r in records if r.get("role") == "learner" and r.get("policy_lag") is not None]
    hit = seeds_lib.first_reaching(curve, args.target) if args.target is not None else None
    print(f"[{bench}/{args.variant}] seed {seed}: "
          + (f"{hit['eval_return']:.1f} at {hit['actor_steps']:,} env steps, {hit['seconds']:.0f} s"
             if hit else f"not reached; best {max((p['eval_return'] for p in curve), default=None)}"),
          flush=True)
    with open(os.path.join(logdir, "run_info.json")) as f:
        resolved = json.load(f).get("precision")  # what auto became on this machine
    return {"eval_curve": curve, "total_wall_seconds": wall_s, "config": config.to_dict(), "precision": resolved,
            "policy_lag_median": statistics.median(lags) if lags else None,
            "env_steps_per_s": summary["actor_steps"] / wall_s,
            "summary": seeds_lib.scalar_summary(summary),
            "logdir": logdir}


def earlier_defaults(settings: Dict[str, Any]) -> Dict[str, Any]:
    """Config fields a record took from defaults that have changed since: ``{field: its value then}``.

    A field the variant set (``overrides``) is its own choice, not a default.
    A ``default`` record made before a default changed is still shown, but
    its row says which values it ran with until it is run again.
    """
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top  (no TF)

    current = json.loads(json.dumps(D4PGConfig().to_dict()))  # tuples as the records hold them: lists
    config = json.loads(json.dumps(settings.get("config", {})))
    overrides = settings.get("overrides", {})
    return {k: v for k, v in sorted(config.items()) if k not in overrides and k in current and current[k] != v}


def at_todays_defaults(settings: Dict[str, Any]) -> bool:
    """Whether a record ran today's default config: every field, its ``overrides`` included.

    A variant that set a field to the value that has since become its default
    (``lr_3e-4`` once 3e-4 was the default) is today's defaults under
    another name; the table says so instead of listing it as a change.
    """
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top  (no TF)

    current = json.loads(json.dumps(D4PGConfig().to_dict()))
    config = json.loads(json.dumps(settings.get("config", {})))
    return bool(config) and all(config.get(k) == v for k, v in current.items())


def write_report(out_dir):
    """Rebuilds d4pg_learning.json/.png from every recorded seed of every variant."""
    variants = seeds_lib.recorded_variants(out_dir, BENCH)
    report = {"benchmark": BENCH, "variants": {}, "machine": seeds_lib.machine()}
    for name, records in sorted(variants.items()):
        settings = records[0]["settings"]
        records = [r for r in records if r["settings"] == settings]
        summary = seeds_lib.summarise(records, settings["target"], settings["max_actor_steps"])
        summary["env_steps_per_s_median"] = statistics.median(r["env_steps_per_s"] for r in records)
        config = records[0].get("config", {})
        earlier = earlier_defaults({"config": config, "overrides": settings["overrides"]})
        report["variants"][name] = {"settings": settings, "summary": summary, "earlier_defaults": earlier,
                                    "todays_defaults": at_todays_defaults({"config": config}),
                                    "machines": sorted({r["machine"]["cpu_model"] for r in records}),
                                    "seeds": [{"seed": r["seed"], "eval_curve": r["eval_curve"],
                                               "total_wall_seconds": r["total_wall_seconds"],
                                               "env_steps_per_s": r["env_steps_per_s"]} for r in records]}
        print(seeds_lib.summary_line(f"  {name}", summary))
    ratio = precision_ratio(report)
    if ratio is not None:
        report["precision_ratio"] = ratio
        print(f"  wall seconds to the target, median: {ratio['variant']} {ratio['median_seconds'][1]:.0f} s / "
              f"{ratio['over']} {ratio['median_seconds'][0]:.0f} s = {ratio['ratio']:.2f}")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{BENCH}.json"), "w") as f:
        json.dump(report, f, indent=1)
    # One plot per task: d4pg_learning.png for cartpole:swingup (the main bench),
    # d4pg_learning_<domain>_<task>.png for the others.
    envs = sorted({v["settings"]["env"] for v in report["variants"].values()})
    for env in envs:
        chosen = {name: v for name, v in report["variants"].items() if v["settings"]["env"] == env}
        first = next(iter(chosen.values()))["settings"]
        stem = BENCH if env == "cartpole:swingup" else f"{BENCH}_{env.replace(':', '_')}"
        seeds_lib.plot_band({name: v["seeds"] for name, v in chosen.items()}, first["target"],
                            f"D4PG {env}, {first['num_actors']} actors", os.path.join(out_dir, f"{stem}.png"))
    return report


if __name__ == "__main__":
    main()
