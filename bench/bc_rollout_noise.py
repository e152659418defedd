"""BC students of real D4PG teachers, cloned from greedy rollouts and from noised ones, over teacher and student seeds.

Each teacher is the one ``tests/agents/bc`` trains (``bc_testlib.train_teacher``:
D4PG on cartpole:balance_sparse until a greedy evaluation reaches 950). Its
greedy return is measured on 10 episodes of environment seed 1; each student
(``BCConfig(rollout_noise=...)``, 3000 learner steps, evaluated every 1000 on
10 episodes of its seed + 1) is cloned once per noise level and student seed
from the same teacher. The question: how often does a student fall below 80%
of its teacher, with and without noise in the teacher's rollouts?

    python bench/bc_rollout_noise.py --teacher-seeds 0,1,2,3,4,5 --noise 0,0.2

Writes ``bench/results/bc_rollout_noise.json`` (+ ``.png``). No timing claim:
the seconds recorded are for orientation only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "agents", "bc"))
sys.path.insert(0, HERE)

import seeds  # noqa: E402  pylint: disable=wrong-import-position

BAR = 0.8


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x]


def _floats(text: str) -> List[float]:
    return [float(x) for x in text.split(",") if x]


def summarise(rows: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Per noise level: students, how many ended (or ever were) below ``BAR`` x teacher, and the worst final ratio."""
    out: Dict[str, Dict[str, Any]] = {}
    for row in rows:
        s = out.setdefault(str(row["noise"]), {"students": 0, "below_bar_at_end": 0, "below_bar_at_any_eval": 0,
                                               "worst_final_ratio": None})
        ratios = [value / row["teacher_return"] for _, value in row["evaluations"]]
        s["students"] += 1
        s["below_bar_at_end"] += int(ratios[-1] < BAR)
        s["below_bar_at_any_eval"] += int(min(ratios) < BAR)
        worst = s["worst_final_ratio"]
        s["worst_final_ratio"] = ratios[-1] if worst is None else min(worst, ratios[-1])
    return out


def _plot(rows: List[Dict[str, Any]], path: str) -> None:
    import matplotlib  # pylint: disable=g-import-not-at-top

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    noises = sorted({row["noise"] for row in rows})
    fig, axes = plt.subplots(1, len(noises), figsize=(5 * len(noises), 3.5), sharey=True, squeeze=False)
    for ax, noise in zip(axes[0], noises):
        for row in (r for r in rows if r["noise"] == noise):
            steps = [step for step, _ in row["evaluations"]]
            ax.plot(steps, [v / row["teacher_return"] for _, v in row["evaluations"]], marker="o", alpha=0.6,
                    label=f"teacher {row['teacher_seed']} student {row['student_seed']}")
        ax.axhline(BAR, color="k", linestyle="--", linewidth=1)
        ax.set_title(f"rollout_noise {noise:g}")
        ax.set_xlabel("student learner steps")
    axes[0][0].set_ylabel("student / teacher greedy return")
    axes[0][-1].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher-seeds", type=_ints, default=[0, 1, 2, 3, 4])
    parser.add_argument("--student-seeds", type=_ints, default=[0, 1, 2])
    parser.add_argument("--noise", type=_floats, default=[0.0, 0.2])
    parser.add_argument("--student-steps", type=int, default=3000)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)

    import numpy as np  # pylint: disable=g-import-not-at-top
    import bc_testlib  # pylint: disable=g-import-not-at-top
    from rlplat_agents.bc.builder import BCBuilder  # pylint: disable=g-import-not-at-top
    from rlplat_agents.bc.config import BCConfig  # pylint: disable=g-import-not-at-top
    from rlplat.offline import run_offline  # pylint: disable=g-import-not-at-top

    rows: List[Dict[str, Any]] = []
    result_path = os.path.join(args.out, "bc_rollout_noise.json")
    with tempfile.TemporaryDirectory() as scratch:
        for teacher_seed in args.teacher_seeds:
            logdir, started = os.path.join(scratch, f"teacher{teacher_seed}"), time.time()
            trained = bc_testlib.train_teacher(logdir, seed=teacher_seed)
            teacher_s = time.time() - started
            teacher_return = float(np.mean(bc_testlib.greedy_returns(logdir, 10, 1)))
            for noise in args.noise:
                for student_seed in args.student_seeds:
                    started = time.time()
                    out = run_offline(BCBuilder(BCConfig(teacher_logdir=logdir, rollout_noise=noise)),
                                      bc_testlib.make_environment, args.student_steps, eval_every=1000,
                                      eval_episodes=10, seed=student_seed)
                    rows.append(dict(teacher_seed=teacher_seed, teacher_env_steps=trained["actor_steps"],
                                     teacher_seconds=teacher_s, teacher_return=teacher_return, noise=noise,
                                     student_seed=student_seed, evaluations=[list(e) for e in out["evaluations"]],
                                     final_loss=float(out["metrics"]["loss"]), student_seconds=time.time() - started))
                    print(json.dumps(rows[-1]), flush=True)
    result = {"command": "python bench/bc_rollout_noise.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "bar": BAR, "task": bc_testlib.TASK, "rows": rows, "summary": summarise(rows),
              "machine": seeds.machine()}
    os.makedirs(args.out, exist_ok=True)
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    _plot(rows, os.path.splitext(result_path)[0] + ".png")
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
