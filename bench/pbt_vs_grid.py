"""Population-based training against a grid of the same compute, D4PG on cartpole:swingup.

Runs, as a user would, two sweeps of ``--trials`` runs of ``--max-actor-steps``
env steps each, on the same resources and seeds:

1. ``rlplat sweep d4pg --scheduler pbt`` over ``sigma`` and
   ``critic-learning-rate`` (the ranges of ``--sigma`` and ``--critic-lr``),
   deciding every ``--perturbation-interval`` env steps;
2. ``rlplat sweep d4pg --grid`` over the same two fields, each at the 25th and
   75th percentile of its range (log scale for the learning rate): a 2 x 2
   grid, one run per point.

Both populations spend the same env steps; the JSON gives each trial's eval
curve (a PBT trial's curve runs through the runs it copied), its final (last
evaluation) and best return, the population's best and median final return, the normalised
mean return along each curve (the scale check's area), PBT's lineage, and each sweep's wall seconds.
Each sweep's directory is kept under ``--workdir``; a sweep whose summary
exists is not run again, so an interrupted bench resumes.

    python bench/pbt_vs_grid.py [--max-actor-steps 100000] [--perturbation-interval 20000]

Writes results/pbt_vs_grid.json and results/pbt_vs_grid.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import cli_runs  # noqa: E402  pylint: disable=wrong-import-position
import seeds  # noqa: E402  pylint: disable=wrong-import-position

from rlplat import scale_check  # noqa: E402  pylint: disable=wrong-import-position

RESULT = os.path.join(HERE, "results", "pbt_vs_grid.json")


def _range(text: str) -> tuple:
    low, _, high = text.partition(":")
    return float(low), float(high)


def quartiles(low: float, high: float, log: bool) -> list:
    """The 25th and 75th percentiles of a uniform (or log-uniform) range: the grid's two values."""
    if log:
        return [math.exp(math.log(low) + q * (math.log(high) - math.log(low))) for q in (0.25, 0.75)]
    return [low + q * (high - low) for q in (0.25, 0.75)]


def _population(directory: str, grid: np.ndarray) -> dict:
    """Each trial's curve, final and best return and mean return over ``grid`` (env steps); the population's
    best and median."""
    trials = {}
    for name, path in cli_runs.trial_dirs(directory).items():
        curve = cli_runs.eval_points(path)
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
        agent = config.get("agent", {})
        auc = scale_check.area(np.asarray(curve), grid) if curve else None
        trials[name] = {"curve": curve, "final": curve[-1][1] if curve else None,
                        "best": max(p[1] for p in curve) if curve else None, "auc": auc,
                        "sigma": agent.get("sigma"), "critic_learning_rate": agent.get("critic_learning_rate")}
    finals = [t["final"] for t in trials.values() if t["final"] is not None]
    return {"trials": trials, "best_final": max(finals) if finals else None,
            "median_final": statistics.median(finals) if finals else None,
            "median_auc": statistics.median(t["auc"] for t in trials.values() if t["auc"] is not None)
            if trials else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cartpole:swingup")
    parser.add_argument("--trials", type=int, default=4, help="population size (the grid is always 2 x 2)")
    parser.add_argument("--max-actor-steps", type=int, default=100_000)
    parser.add_argument("--perturbation-interval", type=int, default=20_000)
    parser.add_argument("--eval-every-steps", type=int, default=10_000)
    parser.add_argument("--sigma", type=_range, default=(0.1, 0.5), metavar="LOW:HIGH")
    parser.add_argument("--critic-lr", type=_range, default=(1e-5, 1e-3), metavar="LOW:HIGH")
    parser.add_argument("--workdir", default=os.path.join("/tmp", "rlplat_pbt_vs_grid"))
    parser.add_argument("--out", default=RESULT)
    args = parser.parse_args(argv)
    if args.trials != 4:
        raise SystemExit("--trials: the grid is 2 x 2, so the same compute is 4 trials")

    os.makedirs(args.workdir, exist_ok=True)
    common = ["--env", args.env, "--max-actor-steps", str(args.max_actor_steps),
              "--eval-every-steps", str(args.eval_every_steps), "--num-actors", "1",
              "--learner-cpus", "0.25", "--actor-cpus", "0.2"]
    pbt_dir, grid_dir = os.path.join(args.workdir, "pbt"), os.path.join(args.workdir, "grid")
    sigma_grid = quartiles(*args.sigma, log=False)
    lr_grid = quartiles(*args.critic_lr, log=args.critic_lr[1] / args.critic_lr[0] >= 10)
    seconds_path = os.path.join(args.workdir, "seconds.json")
    seconds = json.load(open(seconds_path)) if os.path.exists(seconds_path) else {}
    run = lambda argv, log: cli_runs.run(argv, log, bench="pbt_vs_grid")  # noqa: E731
    if not os.path.exists(os.path.join(pbt_dir, "summary.md")):
        seconds["pbt"] = run(["sweep", "d4pg", "--scheduler", "pbt", "--seeds", str(args.trials),
                              "--mutate", f"sigma={args.sigma[0]:g}:{args.sigma[1]:g}",
                              "--mutate", f"critic-learning-rate={args.critic_lr[0]:g}:{args.critic_lr[1]:g}",
                              "--perturbation-interval", str(args.perturbation_interval),
                              "--logdir", pbt_dir, *common], pbt_dir + ".log")
        json.dump(seconds, open(seconds_path, "w"))
    if not os.path.exists(os.path.join(grid_dir, "summary.md")):
        seconds["grid"] = run(["sweep", "d4pg", "--seeds", "1",
                               "--grid", "sigma=" + ",".join(f"{v:.3g}" for v in sigma_grid),
                               "--grid", "critic-learning-rate=" + ",".join(f"{v:.3g}" for v in lr_grid),
                               "--logdir", grid_dir, *common], grid_dir + ".log")
        json.dump(seconds, open(seconds_path, "w"))

    lineage_path = os.path.join(pbt_dir, "lineage.jsonl")
    with open(lineage_path) as f:
        lineage = [json.loads(line) for line in f if line.strip()]
    curves = [np.asarray(cli_runs.eval_points(p)) for d in (pbt_dir, grid_dir)
              for p in cli_runs.trial_dirs(d).values()]
    grid = scale_check.common_grid(curves)
    result = {
        "benchmark": "pbt_vs_grid",
        "command": "python bench/pbt_vs_grid.py",
        "machine": seeds.machine(),
        "env": args.env,
        "settings": {k: v for k, v in vars(args).items() if k not in ("workdir", "out")},
        "grid_values": {"sigma": sigma_grid, "critic_learning_rate": lr_grid},
        "pbt": dict(_population(pbt_dir, grid),
                    lineage=[{k: e[k] for k in ("trial", "copied", "at_env_steps", "changed")} for e in lineage]),
        "grid": _population(grid_dir, grid),
        "seconds": seconds,
    }
    for name in ("pbt", "grid"):
        group = result[name]
        print(f"{name}: best final {group['best_final']:.1f}, median final {group['median_final']:.1f}, "
              f"median mean return along the curve {group['median_auc']:.1f}, {seconds.get(name, float('nan')):.0f} s")
    print(f"pbt: {len(lineage)} exploits")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    _plot(result, os.path.splitext(args.out)[0] + ".png")
    print(f"wrote {args.out}")
    return 0


def _plot(result: dict, path: str) -> None:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, name in zip(axes, ("pbt", "grid")):
        for i, (trial, data) in enumerate(sorted(result[name]["trials"].items())):
            if not data["curve"]:
                continue
            curve = np.asarray(data["curve"])
            label = (f"{trial}: final sigma {data['sigma']:.2g}, critic lr {data['critic_learning_rate']:.2g}"
                     if data["sigma"] is not None else trial)
            ax.plot(curve[:, 0], curve[:, 1], color=f"C{i}", linewidth=1.4, label=label)
        if name == "pbt":
            for event in result["pbt"]["lineage"]:
                ax.axvline(event["at_env_steps"], color="grey", alpha=0.25, linewidth=0.8)
        group = result[name]
        ax.set_title(f"{name}: best final {group['best_final']:.0f}, median final {group['median_final']:.0f}",
                     fontsize=9)
        ax.set_xlabel("env steps (per trial)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("eval return")
    fig.suptitle(f"D4PG {result['env']}: PBT vs a 2x2 grid, 4 trials each, same env steps "
                 f"({result['machine']['cpu_model']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
