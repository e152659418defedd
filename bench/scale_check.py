"""`rlplat scale-check` on cartpole:swingup: D4PG at 1 and 4 actors per env step, and a starved learner it must catch.

Runs, as a user would:

1. ``rlplat scale-check d4pg --env cartpole:swingup --actors 1,4 --seeds 3``
   (the verdict on scale);
2. ``rlplat sweep d4pg --num-actors 1 --seeds 3 --samples-per-insert BROKEN``,
   the same runs with the learner starved of updates, compared with the
   1-actor group of (1) by the same statistics: the check must call that
   one "different".

Each step's directory is kept under ``--workdir``; a step whose directory
already holds its result is not run again, so an interrupted bench resumes.
The eval curves of every run, both comparisons and the machine go into
``results/scale_check.json`` (``tests/bench/test_scale_check_results.py``
recomputes the verdicts from those curves), and the curves into
``results/scale_check.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import cli_runs  # noqa: E402  pylint: disable=wrong-import-position
import seeds  # noqa: E402  pylint: disable=wrong-import-position

from rlplat import scale_check  # noqa: E402  pylint: disable=wrong-import-position
from rlplat.launch import scale_check_command  # noqa: E402  pylint: disable=wrong-import-position
from rlplat.utils import curves  # noqa: E402  pylint: disable=wrong-import-position

RESULT = os.path.join(HERE, "results", "scale_check.json")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cartpole:swingup")
    parser.add_argument("--actors", default="1,4")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-actor-steps", type=int, default=100_000)
    parser.add_argument("--eval-every-steps", type=int, default=10_000)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--broken-samples-per-insert", type=float, default=2.0,
                        help="the starved learner's samples-per-insert (the default is 32)")
    parser.add_argument("--margin", type=float, default=scale_check.DEFAULT_MARGIN)
    parser.add_argument("--workdir", default=os.path.join("/tmp", "rlplat_scale_check"))
    parser.add_argument("--out", default=RESULT)
    args = parser.parse_args(argv)
    # scale-check exits 1 for a verdict other than "equivalent": a result, not a failure.
    _run = lambda argv, log: cli_runs.run(argv, log, ok_codes=(0, 1), bench="scale_check")  # noqa: E731

    os.makedirs(args.workdir, exist_ok=True)
    common = ["--env", args.env, "--seeds", str(args.seeds), "--max-actor-steps", str(args.max_actor_steps),
              "--eval-every-steps", str(args.eval_every_steps), "--eval-episodes", str(args.eval_episodes),
              "--actor-cpus", "0.2", "--learner-cpus", "1"]
    scale_dir = os.path.join(args.workdir, "scale")
    broken_dir = os.path.join(args.workdir, "broken")
    seconds = {}
    if not os.path.exists(os.path.join(scale_dir, scale_check_command.RESULT_JSON)):
        seconds["scale"] = _run(["scale-check", "d4pg", "--actors", args.actors, "--margin", str(args.margin),
                                 "--logdir", scale_dir, *common], scale_dir + ".log")
    if not os.path.exists(os.path.join(broken_dir, "summary.md")):
        seconds["broken"] = _run(["sweep", "d4pg", "--num-actors", args.actors.split(",")[0],
                                  "--samples-per-insert", str(args.broken_samples_per_insert),
                                  "--logdir", broken_dir, *common], broken_dir + ".log")

    with open(os.path.join(scale_dir, scale_check_command.RESULT_JSON)) as f:
        verdict = json.load(f)
    group_a = [cli_runs.eval_points(p) for p in verdict["runs_a"]]
    group_b = [cli_runs.eval_points(p) for p in verdict["runs_b"]]
    broken = [cli_runs.eval_points(p) for p in cli_runs.trial_dirs(broken_dir).values()]
    as_arrays = lambda runs: [np.asarray(c) for c in runs]  # noqa: E731
    starved = scale_check.compare(as_arrays(group_a), as_arrays(broken), label_a=verdict["label_a"],
                                  label_b=f"{verdict['label_a']}, samples_per_insert="
                                          f"{args.broken_samples_per_insert:g}", margin=args.margin)
    result = {
        "benchmark": "scale_check",
        "command": "python bench/scale_check.py",
        "machine": seeds.machine(),
        "env": args.env,
        "settings": {k: v for k, v in vars(args).items() if k not in ("workdir", "out")},
        "scale": {k: v for k, v in verdict.items() if k not in ("runs_a", "runs_b")},
        "starved": starved.to_dict(),
        "curves": {"a": group_a, "b": group_b, "starved": broken},
        "seconds": seconds,
    }
    print(f"scale:   {verdict['verdict']}: difference {verdict['difference']:+.1f} "
          f"[{verdict['low']:+.1f}, {verdict['high']:+.1f}], margin ±{verdict['margin']:.1f}")
    print(f"starved: {starved.describe()}")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    _plot(result, os.path.splitext(args.out)[0] + ".png")
    print(f"wrote {args.out}")
    return 0


def _plot(result: dict, path: str) -> None:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    labels = {"a": result["scale"]["label_a"], "b": result["scale"]["label_b"],
              "starved": result["starved"]["label_b"]}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (key, runs) in enumerate(result["curves"].items()):
        color = f"C{i}"
        for run in runs:
            run = np.asarray(run)
            ax.plot(run[:, 0], run[:, 1], color=color, alpha=0.3, linewidth=0.8)
        band = curves.band([np.asarray(r) for r in runs])
        ax.plot(band["x"], band["mean"], color=color, linewidth=2, label=f"{labels[key]} ({len(runs)} seeds)")
        ax.fill_between(band["x"], band["min"], band["max"], color=color, alpha=0.15, linewidth=0)
    scale = result["scale"]
    ax.set_title(f"{result['env']}: {scale['label_a']} vs {scale['label_b']}: {scale['verdict']}; "
                 f"starved learner: {result['starved']['verdict']}", fontsize=9)
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
