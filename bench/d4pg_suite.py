"""D4PG across the control suite, with one set of defaults, against the published state-based scores.

Each task runs ``rlplat train d4pg --env TASK`` as a user would (the default
D4PG config, 2 actors, local Ray, Reverb in the learner) for
``--max-actor-steps`` env steps, with ``--eval-episodes`` greedy episodes every
``--eval-every`` env steps. Seeds run one after another and each seed's record
is kept in ``results/runs/d4pg_suite-<variant>-<domain>_<task>-seed<N>.json``
as soon as it ends, so an interrupted sweep resumes where it stopped.

    python bench/d4pg_suite.py [--tasks walker:walk,cheetah:run | --tasks all]
        [--seeds 3] [--max-actor-steps 500000] [--eval-every 20000] [--eval-episodes 10]
        [--variant NAME --set FIELD=VALUE ...] [--runner local --num-actors 1] [--report-only]

``--runner local`` runs the same code in one process (``run_local``: actors
and learner take turns, one learner call per its worth of inserts), the
single-process reference a find-why run compares the Ray runs against.

Env steps are counted as the published reference counts them: environment
steps, so with ``--action-repeat R`` one agent step is R env steps (the
defaults use no action repeat, R = 1). A task's score at S env steps is the
mean of the last 3 evaluations at or before S (10 episodes each).

Writes ``d4pg_suite.json`` (per task: settings, per-seed curves, scores at
100k and 500k, steps and wall time to 0.9x the published 500k score) and
``d4pg_suite.png`` (every task's mean and min-max band against env steps, the
published score as a line); ``bench/learning_table.py`` renders the table
into ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import d4pg_learning  # noqa: E402
from bench import seeds as seeds_lib  # noqa: E402

BENCH = "d4pg_suite"
# The tasks every paper reports first (targets) and two harder ones (frontier).
TARGET_TASKS = ("walker:walk", "cheetah:run", "cartpole:swingup")
FRONTIER_TASKS = ("hopper:stand", "walker:run")
ALL_TASKS = TARGET_TASKS + FRONTIER_TASKS
TARGET_FRACTION = 0.9
SCORE_STEPS = (100_000, 500_000)

CURL = ("Laskin, Srinivas and Abbeel, CURL: Contrastive Unsupervised Representations for "
        "Reinforcement Learning, ICML 2020, Table 1, row State SAC")
# (mean, std) of State SAC from CURL's Table 1, by env steps; None where the table has no entry.
PUBLISHED: Dict[str, Dict[int, Optional[tuple]]] = {
    "cartpole:swingup": {100_000: (835.0, 22.0), 500_000: (848.0, 15.0)},
    "walker:walk": {100_000: (891.0, 82.0), 500_000: (948.0, 54.0)},
    "cheetah:run": {100_000: (616.0, 18.0), 500_000: (795.0, 30.0)},
    "finger:spin": {100_000: (811.0, 46.0), 500_000: (923.0, 21.0)},
    "reacher:easy": {100_000: (746.0, 25.0), 500_000: (923.0, 24.0)},
    "ball_in_cup:catch": {100_000: (746.0, 91.0), 500_000: (974.0, 33.0)},
}
# Tasks CURL's table lacks: state SAC curves published with TD-MPC2 (Hansen, Su and Wang,
# ICLR 2024; the repository's results/sac/<task>.csv, 3 seeds), mean and std over seeds at
# those steps as read from the files. Curves, not a table of the paper: a weaker source.
TDMPC2_SAC = ("Hansen, Su and Wang, TD-MPC2, ICLR 2024: state SAC curves in the authors' "
              "results/sac/*.csv, 3 seeds")
PUBLISHED_CURVES: Dict[str, Dict[int, tuple]] = {
    "walker:run": {500_000: (604.1, 42.6)},
    "hopper:stand": {500_000: (0.8, 0.6)},
}


# Control-suite returns lie in [0, 1000]. A published mean below 1% of that is an agent that
# failed the task (state SAC on hopper:stand): a ratio to it, or 0.9x it as a bar, says nothing.
MIN_COMPARABLE_PUBLISHED = 10.0


def comparable(ref: Optional[tuple]) -> bool:
    """Whether a published ``(mean, std)`` is a score to take a ratio to (``MIN_COMPARABLE_PUBLISHED``)."""
    return ref is not None and ref[0] >= MIN_COMPARABLE_PUBLISHED


def published(task: str) -> tuple:
    """``({steps: (mean, std)}, source)`` for ``task``: CURL's table, else the TD-MPC2 curves."""
    if task in PUBLISHED:
        return PUBLISHED[task], CURL
    if task in PUBLISHED_CURVES:
        return PUBLISHED_CURVES[task], TDMPC2_SAC
    return {}, None


def _slug(task: str) -> str:
    return task.replace(":", "_")


def task_list(text: str) -> List[str]:
    """``--tasks`` -> task names ("all": targets, then frontier tasks)."""
    from rlplat_envs import suite  # pylint: disable=g-import-not-at-top  (no TF)

    names = list(ALL_TASKS) if text == "all" else [t for t in text.split(",") if t]
    if not names:
        raise SystemExit("--tasks: give DOMAIN:TASK names, comma-separated, or 'all'")
    for name in names:
        try:
            suite.check_name(name)
        except Exception as e:  # pylint: disable=broad-except  (one line, as the CLI)
            raise SystemExit(f"--tasks: {e}") from None
    return names


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TARGET_TASKS),
                        help="comma-separated DOMAIN:TASK names, or 'all'")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--max-actor-steps", type=int, default=500_000)
    parser.add_argument("--eval-every", type=int, default=20_000, help="env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--runner", choices=("ray", "local"), default="ray",
                        help="ray: as `rlplat train` runs (default); local: run_local, one process taking "
                             "turns (the single-process reference for find-why runs)")
    seeds_lib.add_sweep_arguments(parser, "D4PGConfig",
                                  os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    overrides = d4pg_learning._parse_sets(args.set)  # pylint: disable=protected-access
    if not args.report_only:
        tasks = task_list(args.tasks)
        seed_list = seeds_lib.seed_list(args)
        # Seed-major: every task gets its first seed before any gets a third.
        for seed in seed_list:
            for task in tasks:
                try:
                    run_task_seed(args, overrides, task, seed)
                except Exception as e:  # pylint: disable=broad-except  (one failed run must not end the sweep)
                    print(f"[{BENCH}] {task} seed {seed} failed, no record kept: "
                          f"{str(e).splitlines()[0] if str(e) else type(e).__name__}", flush=True)
    return write_report(args.out)


def run_task_seed(args, overrides, task: str, seed: int) -> Dict[str, Any]:
    """Runs (or reuses) one task's seed; returns its record."""
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top  (no TF)

    # The whole config, not just the overrides: a record made under other
    # defaults must not be reused after a default changes.
    settings = {"env": task, "target": None, "num_actors": args.num_actors,
                "max_actor_steps": args.max_actor_steps, "eval_every": args.eval_every,
                "eval_episodes": args.eval_episodes, "overrides": overrides, "action_repeat": 1,
                "config": D4PGConfig(**overrides).to_dict()}
    if args.runner != "ray":  # records made before --runner existed ran on Ray
        settings["runner"] = args.runner
    run_args = argparse.Namespace(env=task, variant=f"{args.variant}-{_slug(task)}", target=None,
                                  num_actors=args.num_actors, max_actor_steps=args.max_actor_steps,
                                  eval_every=args.eval_every, eval_episodes=args.eval_episodes,
                                  runner=args.runner)
    records = seeds_lib.run_seeds(args.out, BENCH, run_args.variant, [seed], settings,
                                  lambda s: d4pg_learning.run_one(run_args, overrides, s, bench=BENCH),
                                  reuse=not args.no_reuse)
    return records[0]


def score_at(curve: Sequence[Dict[str, Any]], steps: int) -> Optional[float]:
    """Mean of the last 3 evaluations at or before ``steps`` env steps (None: no eval by then,
    or the run stopped well short of ``steps``)."""
    points = [p for p in curve if p["actor_steps"] <= steps]
    if not points or curve[-1]["actor_steps"] < 0.95 * steps:
        return None
    return float(np.mean([p["eval_return"] for p in points[-3:]]))


def first_reaching(curve: Sequence[Dict[str, Any]], bar: float) -> Optional[Dict[str, Any]]:
    """The first evaluation at or above ``bar``."""
    return next((p for p in curve if p["eval_return"] >= bar), None)


def task_summary(task: str, records: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Scores at 100k/500k over seeds, the published ones, ratios and per-seed steps to 0.9x."""
    refs, source = published(task)
    bar = refs[500_000][0] * TARGET_FRACTION if comparable(refs.get(500_000)) else None
    out: Dict[str, Any] = {"task": task, "num_seeds": len(records), "published_source": source,
                           "bar": bar, "scores": {}, "per_seed": []}
    for steps in SCORE_STEPS:
        values = [v for v in (score_at(r["eval_curve"], steps) for r in records) if v is not None]
        ref = refs.get(steps)
        mean = float(np.mean(values)) if values else None
        out["scores"][str(steps)] = {
            "num_seeds": len(values), "mean": mean, "std": float(np.std(values)) if values else None,
            "published_mean": ref[0] if ref else None, "published_std": ref[1] if ref else None,
            "ratio": (mean / ref[0]) if (comparable(ref) and mean is not None) else None,
            "meets_target": (mean >= TARGET_FRACTION * ref[0]) if (comparable(ref) and mean is not None) else None,
            "published_fails_task": ref is not None and not comparable(ref)}
    for r in records:
        hit = first_reaching(r["eval_curve"], bar) if bar is not None else None
        out["per_seed"].append({
            "seed": r["seed"], "total_wall_seconds": r["total_wall_seconds"],
            "env_steps_per_s": r["env_steps_per_s"], "cpu_model": r["machine"]["cpu_model"],
            "score_100k": score_at(r["eval_curve"], 100_000), "score_500k": score_at(r["eval_curve"], 500_000),
            "steps_to_bar": hit["actor_steps"] if hit else None, "seconds_to_bar": hit["seconds"] if hit else None})
    return out


def _with_current_defaults(settings: Dict[str, Any]) -> Dict[str, Any]:
    """``settings`` with config fields added since the record was made set to their defaults.

    A field is added with a default that keeps the old behaviour (``precision``
    came as fp32), so a record without it ran at that default; a default that
    changed later still differs, as the old record names its own value.
    """
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top  (no TF)

    return dict(settings, config={**D4PGConfig().to_dict(), **settings.get("config", {})})


def _rows(out_dir: str) -> List[tuple]:
    """The records pooled into the table's rows: ``(key, name, settings, labels, records)``.

    A row holds the records of one task that ran the same experiment: equal
    settings and the same whole config, whatever variant name each was
    recorded under (a variant that set a value which has since become the
    default ran today's defaults). A row whose config is today's default on
    the default runner is named ``default``; any other takes its records'
    variant names. One record per seed: the one recorded under the row's name
    if there is one.
    """
    import json  # pylint: disable=g-import-not-at-top

    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for records in seeds_lib.recorded_variants(out_dir, BENCH, superseded=True).values():
        for r in records:
            settings = _with_current_defaults(r["settings"])
            experiment = {k: v for k, v in settings.items() if k != "overrides"}
            groups.setdefault((settings["env"], json.dumps(experiment, sort_keys=True)), []).append(r)
    pooled = []
    for (task, _), records in groups.items():
        settings = _with_current_defaults(records[0]["settings"])
        config = json.loads(json.dumps(settings["config"]))
        differs = set(d4pg_learning.earlier_defaults(dict(settings, overrides={})))  # every field off today's
        chosen = {k for r in records for k in r["settings"].get("overrides", {})}
        settings = dict(settings, overrides={k: config[k] for k in sorted(differs & chosen)})
        labels = sorted({r["variant"].rpartition("-")[0] for r in records})
        name = ("default" if not differs and settings.get("runner", "ray") == "ray"
                and settings.get("num_actors") == 2 else "+".join(labels))
        by_seed: Dict[int, Dict[str, Any]] = {}
        for r in records:
            if r["seed"] not in by_seed or r["variant"].rpartition("-")[0] == name:
                by_seed[r["seed"]] = r
        pooled.append((bool(differs - chosen), _task_order(task), name, settings, labels,
                       [by_seed[s] for s in sorted(by_seed)]))
    rows, keys = [], set()
    # Today's config first; a name met again (the same variant under earlier defaults) is numbered.
    for _, _, name, settings, labels, records in sorted(pooled, key=lambda p: p[:3]):
        key, k = name, 1
        while (settings["env"], key) in keys:
            k += 1
            key = f"{name} #{k}"
        keys.add((settings["env"], key))
        rows.append((key, name, settings, labels, records))
    return rows


def _task_order(task: str) -> tuple:
    return (ALL_TASKS.index(task) if task in ALL_TASKS else len(ALL_TASKS), task)


def write_report(out_dir: str) -> Dict[str, Any]:
    """Rebuilds d4pg_suite.json/.png from every recorded seed, superseded records included."""
    import json  # pylint: disable=g-import-not-at-top

    report: Dict[str, Any] = {"benchmark": BENCH, "machine": seeds_lib.machine(), "env_steps":
                              "environment steps (no action repeat: one agent step is one env step), "
                              "as CURL counts them", "published_source": CURL, "variants": {}}
    for key, name, settings, labels, records in _rows(out_dir):
        earlier = d4pg_learning.earlier_defaults(settings)
        entry = task_summary(settings["env"], records)
        entry.update(name=name, settings=settings, earlier_defaults=earlier,
                     recorded_as=[label for label in labels if label != name],
                     machines=sorted({r["machine"]["cpu_model"] for r in records}),
                     seeds=[{"seed": r["seed"], "eval_curve": r["eval_curve"],
                             "total_wall_seconds": r["total_wall_seconds"]} for r in records])
        report["variants"].setdefault(key, {})[settings["env"]] = entry
        s500 = entry["scores"]["500000"]
        print(f"  [{name}] {settings['env']}: {len(records)} seeds, 500k score "
              + ("-" if s500["mean"] is None else f"{s500['mean']:.0f} ± {s500['std']:.0f}")
              + ("" if s500["ratio"] is None else f" ({s500['ratio']:.2f}x published)")
              + ("" if not earlier else f"; earlier defaults {earlier}"))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{BENCH}.json"), "w") as f:
        json.dump(report, f, indent=1)
    if report["variants"]:
        plot(report, os.path.join(out_dir, f"{BENCH}.png"))
    return report


def plot(report: Dict[str, Any], path: str) -> None:
    """One panel per task: each variant's mean and min-max band against env steps, published lines."""
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    tasks = sorted({t for v in report["variants"].values() for t in v}, key=_task_order)
    cols = min(3, len(tasks))
    rows = (len(tasks) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for variant, entries in sorted(report["variants"].items()):
            entry = entries.get(task)
            if not entry:
                continue
            end = max(p["actor_steps"] for s in entry["seeds"] for p in s["eval_curve"])
            grid = np.linspace(0, end, 200)
            ys = []
            for s in entry["seeds"]:
                xs = np.array([p["actor_steps"] for p in s["eval_curve"]], float)
                rs = np.array([p["eval_return"] for p in s["eval_curve"]], float)
                ys.append(np.interp(grid, xs, rs, left=np.nan, right=np.nan))
            ys = np.array(ys)
            with np.errstate(all="ignore"):
                import warnings  # pylint: disable=g-import-not-at-top
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    mean, low, high = np.nanmean(ys, 0), np.nanmin(ys, 0), np.nanmax(ys, 0)
            line, = ax.plot(grid, mean, label=f"rlplat {entry.get('name', variant)}"
                            f"{', earlier defaults' if entry.get('earlier_defaults') else ''}"
                            f" ({len(entry['seeds'])} seeds)")
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2)
        for steps, style in ((100_000, ":"), (500_000, "--")):
            refs, source = published(task)
            ref = refs.get(steps)
            if ref:
                ax.axhline(ref[0], color="gray", ls=style, lw=1,
                           label=f"State SAC @{steps // 1000}k ({'CURL' if source == CURL else 'TD-MPC2 curves'})")
        ax.set_title(task, fontsize=9)
        ax.set_xlabel("env steps")
        ax.set_ylabel("greedy eval return")
        ax.set_ylim(0, 1000)
        ax.legend(fontsize=6, loc="lower right")
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    fig.suptitle(f"D4PG, default config, 2 actors ({report['machine']['cpu_model']})\n"
                 "mean and min-max band over seeds", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
