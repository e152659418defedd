"""``rlplat plot RUN [RUN...]``: learning curves of runs, grouped by config, with a band.

    rlplat plot runs/d4pg-* --metric eval_return --x env_steps -o curves.png --csv curves.csv

Runs whose configs differ only in seed form one curve: the mean over runs and
a min-max band (see ``rlplat.utils.curves``); each run is also drawn thinly.
The legend names what differs between groups, read from each run's
``config.json``. Works on live runs (it reads what is written so far).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

from rlplat.launch import common

NAME = "plot"
HELP = "plot learning curves of runs (mean and min-max band over seeds)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories (each with metrics.jsonl)")
    parser.add_argument("--metric", default="eval_return",
                        help="the logged value to plot (default: eval_return)")
    parser.add_argument("--x", default="env_steps", choices=("env_steps", "learner_steps", "wall_time"),
                        help="x axis (default: env_steps; wall_time is seconds since the run's first record)")
    parser.add_argument("-o", "--output", default="curves.png", metavar="PNG",
                        help="image to write (.png, .svg or .pdf; default: curves.png)")
    parser.add_argument("--csv", default=None, metavar="CSV",
                        help="also write the numbers behind the plot (group, x, mean, min, max, runs)")


def run(args: argparse.Namespace) -> int:
    from rlplat.utils import curves  # pylint: disable=g-import-not-at-top

    for path, what in ((args.output, "-o"), (args.csv, "--csv")):
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise common.UsageError(f"{what} {path}: folder {folder} does not exist; create it first")
        if os.path.isdir(path):
            raise common.UsageError(f"{what} {path} is a directory; name a file")
    if os.path.splitext(args.output)[1].lower() not in (".png", ".svg", ".pdf"):
        raise common.UsageError(f"-o {args.output}: use a .png, .svg or .pdf file name")
    try:
        runs = [curves.load_run(path) for path in args.runs]
    except curves.CurveError as e:
        raise common.UsageError(str(e)) from None
    groups = curves.group(runs)
    per_group = {label: [curves.points(r, args.metric, args.x) for r in members]
                 for label, members in groups.items()}
    if not any(len(p) for ps in per_group.values() for p in ps):
        known = ", ".join(curves.metrics_of(runs)) or "none"
        raise common.UsageError(f"no run logged {args.metric!r} (with --x {args.x}); "
                                f"pass --metric one of: {known}")
    bands = {}
    for label, member_points in per_group.items():
        try:
            bands[label] = curves.band(member_points)
        except curves.CurveError as e:
            sys.stderr.write(f"rlplat: warning: {label}: {e}; drawn without a band\n")
    _draw(args, groups, per_group, bands)
    if args.csv:
        _write_csv(args.csv, bands)
    for label, b in bands.items():
        sys.stdout.write(f"{label}: {int(b['n'][0])} run(s), {args.metric} at x={b['x'][-1]:.6g}: "
                         f"mean {b['mean'][-1]:.4g} (min {b['min'][-1]:.4g}, max {b['max'][-1]:.4g})\n")
    sys.stdout.write(f"wrote {args.output}" + (f" and {args.csv}" if args.csv else "") + "\n")
    return common.EXIT_OK


def _draw(args, groups, per_group, bands) -> None:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, member_points) in enumerate(per_group.items()):
        color = f"C{i % 10}"
        for p in member_points:
            if len(p):
                ax.plot(p[:, 0], p[:, 1], color=color, alpha=0.25, linewidth=0.8)
        b = bands.get(label)
        if b is not None:
            ax.plot(b["x"], b["mean"], color=color, linewidth=2,
                    label=f"{label} (mean of {len(groups[label])}, band min-max)")
            ax.fill_between(b["x"], b["min"], b["max"], color=color, alpha=0.2, linewidth=0)
        else:
            ax.plot([], [], color=color, label=f"{label} ({len(groups[label])} runs)")
    ax.set_xlabel({"env_steps": "env steps", "learner_steps": "learner steps",
                   "wall_time": "seconds"}[args.x])
    ax.set_ylabel(args.metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    plt.close(fig)


def _write_csv(path: str, bands) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["group", "x", "mean", "min", "max", "runs"])
        for label, b in bands.items():
            for j in range(len(b["x"])):
                writer.writerow([label, f"{b['x'][j]:.10g}", f"{b['mean'][j]:.10g}",
                                 f"{b['min'][j]:.10g}", f"{b['max'][j]:.10g}", int(b["n"][j])])
