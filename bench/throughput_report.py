"""The throughput benches' command line, report, JSON and figure: the parts that do not depend on the agent.

``d4pg_throughput.py`` and ``impala_throughput.py`` take the same flags for
what means the same (``add_actor_arguments``, ``add_run_arguments``), build
their report in the same frame (``new_report``, ``run_parts``) and write it
the same way (``write_outputs``: ``<name>.json`` and ``<name>.png`` under
``--out``), with a shared panel for where an actor step's CPU goes
(``plot_cpu_breakdown``). What they measure is in ``throughput_kit.py``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Dict, Sequence, Tuple

from bench import cpu_accounting as accounting
from bench import seeds as seeds_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_actor_arguments(parser, *, env: str, actor_chunks: int, raw_steps: int) -> None:
    """``--env``, ``--seed`` and part 1's flags."""
    parser.add_argument("--env", default=env)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--actor-rounds", type=int, default=5)
    parser.add_argument("--actor-chunks", type=int, default=actor_chunks, help="run_steps chunks per actor window")
    parser.add_argument("--raw-steps", type=int, default=raw_steps, help="random-action steps per raw block")
    parser.add_argument("--envs-per-actor", type=int, default=1,
                        help="environments per actor process in the actor part (--envs-per-actor)")


def add_run_arguments(parser, *, max_actor_steps: int, parts: str, name: str) -> None:
    """Part 3's flags, ``--parts``, where the outputs go, and the learner child's hidden flags."""
    import argparse  # pylint: disable=g-import-not-at-top

    parser.add_argument("--max-actor-steps", type=int, default=max_actor_steps)
    parser.add_argument("--steady-from", type=float, default=0.25,
                        help="fraction of max_actor_steps before which the system run is warm-up")
    parser.add_argument("--parts", default=parts)
    parser.add_argument("--name", default=name, help="output file stem")
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    parser.add_argument("--learner-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--learner-threads", default="1,2", help=argparse.SUPPRESS)


def logger(started: float) -> Callable[[str], None]:
    """A progress line printer, stamped with the seconds since ``started``."""
    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.1f}s] {msg}", flush=True)
    return log


def new_report(benchmark: str, script: str, args, **fields: Any) -> Dict[str, Any]:
    """The report's head: what ran, where (the CPU model: figures depend on it), ``fields``, the load."""
    return {"benchmark": benchmark, "env": args.env,
            "command": "python " + " ".join([os.path.relpath(os.path.abspath(script), REPO)] + sys.argv[1:]),
            "cpus": os.cpu_count(), "machine": seeds_lib.machine(), **fields,
            "load_average": {"start": accounting.load_average()}, "seconds": {}}


def run_parts(report: Dict[str, Any], parts: Sequence[str], steps: Sequence[Tuple[str, Callable[[], Any]]]) -> None:
    """Runs each ``(part, fn)`` named in ``parts``, in order, into ``report[part]``, with its seconds and load after."""
    for part, fn in steps:
        if part in parts:
            mark = time.time()
            report[part] = fn()
            report["seconds"][part] = round(time.time() - mark, 1)
            report["load_average"][f"after_{part}"] = accounting.load_average()


def write_outputs(report: Dict[str, Any], args, plot: Callable[[Dict[str, Any], str], None],
                  print_summary: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    """``<name>.json`` and ``<name>.png`` under ``--out``, then the console summary."""
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(report, f, indent=2)
    plot(report, os.path.join(args.out, f"{args.name}.png"))
    print_summary(report)
    return report


def headline(agent: str, report: Dict[str, Any]) -> str:
    """The console summary's first line."""
    return (f"\n== {agent} throughput ({report['env']}, {report['cpus']} CPUs, load "
            f"{report['load_average']['start']}) ==")


def cores_text(cores: Dict[str, float], at_least: float = 0.0) -> str:
    """``"learner 1.02, actors 0.61"``: cores by role (or thread), those using ``at_least``."""
    return ", ".join(f"{k} {v:.2f}" for k, v in cores.items() if v >= at_least)


def figure(rows: int, height_per_row: float):
    """A rows x 2 figure for the report: ``(plt, fig, axes)`` (Agg backend: no display needed)."""
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    fig, axes = plt.subplots(rows, 2, figsize=(13, height_per_row * rows))
    return plt, fig, axes


def save_figure(plt, fig, agent: str, report: Dict[str, Any], path: str) -> None:
    fig.suptitle(f"{agent} throughput, {report['env']}, {report['cpus']} CPUs (load "
                 f"{report['load_average']['start']})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cpu_breakdown(plt, ax, results: Dict[str, Dict[str, Any]], *, unit: str, raw_key: str,
                       headroom: float) -> None:
    """Stacked CPU-us per env ``unit`` by part for each actor count, beside a raw random-action ``unit``."""
    keys = sorted(results)
    labels = [f"{k} actor{'s' if k != '1' else ''}" for k in keys] + ["raw env"]
    bottom = [0.0] * len(labels)
    colors = plt.get_cmap("tab10").colors
    for i, part in enumerate(accounting.PARTS):
        values = [results[k]["per_step_us"][part] for k in keys] + [0.0]
        if part == "env":
            values[-1] = results[keys[0]][raw_key]
        ax.bar(labels, values, bottom=bottom, label=accounting.PART_LABELS[part], color=colors[i % 10])
        bottom = [b + v for b, v in zip(bottom, values)]
    for x, total in enumerate(bottom):
        ax.text(x, total, f"{total:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, headroom * max(bottom))
    ax.set_ylabel(f"CPU us per env {unit}")
    ax.set_title(f"Where an actor {unit}'s CPU goes", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")


def bar_panel(ax, labels: Sequence[str], values: Sequence[float], colors: Sequence[str], *, fmt: str, top: float,
              ylabel: str, title: str, title_size: float = 10) -> None:
    """Labelled bars side by side (a measured rate against its reference) on ``ax``, y from 0 to ``top``."""
    bars = ax.bar(labels, values, color=colors)
    ax.bar_label(bars, fmt=fmt)
    ax.set_ylim(0, top)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=title_size)
