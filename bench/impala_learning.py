"""Wall time for IMPALA to reach an eval return on gym:CartPole-v1, on the real Ray layout.

Runs `run_on_ray` as `rlplat train impala` does (local Ray, the Reverb queue
inside the learner, default IMPALAConfig), with greedy evaluations every
`--eval-every` actor steps, and stops at the first one that reaches `--target`.
Wall time counts from the call (Ray start, TF imports and warm-up included).

    python bench/impala_learning.py [--target 450] [--num-actors 2] [--max-actor-steps 3000000]

Writes impala_learning.json (figures + the eval curve) and impala_learning.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="gym:CartPole-v1")
    parser.add_argument("--target", type=float, default=450.0)
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--max-actor-steps", type=int, default=3_000_000)
    parser.add_argument("--eval-every", type=int, default=20_000, help="actor steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)

    from agents.impala.builder import IMPALABuilder
    from agents.impala.config import IMPALAConfig
    from rlplat.distributed.layout import RayLayoutConfig, run_on_ray

    logdir = args.logdir or tempfile.mkdtemp(prefix="impala_learning_")
    knobs = RayLayoutConfig(eval_every_actor_steps=args.eval_every, eval_episodes=args.eval_episodes,
                            target_eval_return=args.target, checkpoint_every_s=3600.0)
    config = IMPALAConfig()
    start = time.time()
    summary = run_on_ray(IMPALABuilder(config=config), args.env, num_actors=args.num_actors,
                         max_actor_steps=args.max_actor_steps, logdir=logdir, seed=args.seed, layout=knobs)
    wall_s = time.time() - start

    curve, lags = [], []
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if record.get("role") == "evaluator":
                curve.append({"seconds": record["wall_time"] - start, "actor_steps": record["step"],
                              "learner_steps": record.get("learner_steps"),
                              "eval_return": record["eval_return"]})
            elif record.get("role") == "learner" and "policy_lag_mean" in record:
                lags.append(record["policy_lag_mean"])
    reached = next((point for point in curve if point["eval_return"] >= args.target), None)
    report = {
        "benchmark": "impala_learning",
        "env": args.env,
        "num_actors": args.num_actors,
        "target_eval_return": args.target,
        "reached": reached is not None,
        "seconds_to_target": reached["seconds"] if reached else None,
        "actor_steps_to_target": reached["actor_steps"] if reached else None,
        "learner_steps_to_target": reached["learner_steps"] if reached else None,
        "total_wall_seconds": wall_s,
        "mean_policy_lag": sum(lags) / len(lags) if lags else None,
        "summary": {k: v for k, v in summary.items() if isinstance(v, (int, float, str, type(None)))},
        "config": config.to_dict(),
        "eval_curve": curve,
        "cpus": os.cpu_count(),
        "logdir": logdir,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "impala_learning.json"), "w") as f:
        json.dump(report, f, indent=2)
    _plot(report, os.path.join(args.out, "impala_learning.png"))
    if reached:
        print(f"eval return {reached['eval_return']:.1f} >= {args.target:g} after {reached['seconds']:.0f} s, "
              f"{reached['actor_steps']:,} env steps, {reached['learner_steps']:,} learner steps")
    else:
        print(f"target {args.target:g} not reached in {wall_s:.0f} s; "
              f"best {max((p['eval_return'] for p in curve), default=None)}")
    return report


def _plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = report["eval_curve"]
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((ax_t, "seconds", "wall time (s)"), (ax_s, "actor_steps", "env steps")):
        ax.plot([p[key] for p in curve], [p["eval_return"] for p in curve], marker="o", ms=3)
        ax.axhline(report["target_eval_return"], color="gray", ls="--", lw=1)
        ax.set_xlabel(label)
        ax.set_ylabel("greedy eval return")
    if report["reached"]:
        ax_t.axvline(report["seconds_to_target"], color="green", lw=1)
        ax_s.axvline(report["actor_steps_to_target"], color="green", lw=1)
    title = (f"IMPALA {report['env']}, {report['num_actors']} actors, {report['cpus']} CPUs: "
             + (f"{report['target_eval_return']:g} reached in {report['seconds_to_target']:.0f} s"
                if report["reached"] else "target not reached"))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
