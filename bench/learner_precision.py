"""Part of ``d4pg_throughput.py``: the memory-fed D4PG learner's steps/s in fp32 against bf16 (issue 31).

Each run is the throughput bench's learner child (``--learner-child``: one
learner alone in a process, the layout's TF threads, default config but for
``precision``, fed one batch held in memory: the learner's own limit); runs
alternate fp32, bf16, bf16, fp32, ... so drift in the machine's load falls on
both alike, and the kept ratio is the median over rounds of (bf16 run's
median block steps/s / the fp32 run's of the same round).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List

from bench import throughput_kit

# Issue 31: on a CPU with bfloat16 instructions, bf16 learner steps/s >= 1.4x fp32's.
TARGET_RATIO = 1.4
PRECISIONS = ("fp32", "bf16")


def _median(values: List[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def measure(args: Any, threads, child_command: Callable[[str, str], List[str]], env: Dict[str, str],
            log: Callable[[str], None]) -> Dict[str, Any]:
    """Runs ``args.precision_rounds`` rounds of one fp32 and one bf16 child, A B B A; returns the report part.

    ``child_command(path, precision)`` is the child's command line writing its blocks to ``path``.
    """
    from rlplat import precision as precision_lib  # pylint: disable=g-import-not-at-top  (no TF)

    runs: Dict[str, List[Dict[str, Any]]] = {p: [] for p in PRECISIONS}
    log(f"learner precision: {args.precision_rounds} rounds of fp32 and bf16 memory-fed learners, "
        f"one per process, A B B A, TF threads {threads[0]}/{threads[1]}")
    for r in range(args.precision_rounds):
        for p in (PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]):
            runs[p].append(throughput_kit.run_child(lambda path, p=p: child_command(path, p), env))
            log(f"  round {r + 1}, {p}: " + ", ".join(f"{_rate(b):.1f}" for b in runs[p][-1]["blocks"])
                + " steps/s")
    run_rate = {p: [_median([_rate(b) for b in run["blocks"]]) for run in runs[p]] for p in PRECISIONS}
    ratios = [b / a for a, b in zip(run_rate["fp32"], run_rate["bf16"])]
    flags = precision_lib.cpu_flags()
    return {
        "cpu_bf16_flags": [f for f in precision_lib.BF16_CPU_FLAGS if f in flags],
        "rounds": args.precision_rounds,
        "fp32_steps_per_s": _median(run_rate["fp32"]),
        "bf16_steps_per_s": _median(run_rate["bf16"]),
        "fp32_steps_per_s_per_round": [round(x, 2) for x in run_rate["fp32"]],
        "bf16_steps_per_s_per_round": [round(x, 2) for x in run_rate["bf16"]],
        "ratio": _median(ratios),
        "ratio_per_round": [round(x, 4) for x in ratios],
        "target_ratio": TARGET_RATIO,
        "method": "memory-fed D4PGLearner (default config but precision), one per process; runs alternate "
                  "fp32, bf16, bf16, fp32, ...; ratio = median over rounds of (bf16 run's median block "
                  "steps/s / the fp32 run's)",
    }


def _rate(block: Dict[str, float]) -> float:
    return block["steps"] / block["wall_s"]


def summary_line(res: Dict[str, Any]) -> str:
    """One console line."""
    return (f"learner precision: bf16 {res['bf16_steps_per_s']:.1f} vs fp32 {res['fp32_steps_per_s']:.1f} steps/s "
            f"(memory-fed): ratio {res['ratio']:.2f} (target {res['target_ratio']}; per round "
            f"{', '.join(f'{x:.2f}' for x in res['ratio_per_round'])}); CPU bf16 flags: "
            f"{', '.join(res['cpu_bf16_flags']) or 'none'}")


def plot(ax: Any, res: Dict[str, Any]) -> None:
    """The two rates as bars, the target as a line, on ``ax``."""
    bars = ax.bar(["fp32\n(memory-fed)", "bf16\n(memory-fed)"], [res["fp32_steps_per_s"], res["bf16_steps_per_s"]],
                  color=["tab:gray", "tab:olive"])
    ax.bar_label(bars, fmt="%.1f")
    ax.axhline(res["target_ratio"] * res["fp32_steps_per_s"], color="tab:green", ls="--", lw=1,
               label=f"target: {res['target_ratio']:g} x fp32")
    ax.set_ylim(0, 1.25 * max(res["bf16_steps_per_s"], res["target_ratio"] * res["fp32_steps_per_s"]))
    ax.set_ylabel("learner steps / s (median of rounds)")
    ax.set_title(f"Learner precision: bf16 / fp32 = {res['ratio']:.2f} (A B B A, {res['rounds']} rounds)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left")


if __name__ == "__main__":
    sys.exit("run through bench/d4pg_throughput.py --parts precision")
