"""IMPALA learning on the real Ray layout: CartPole time-to-target, plus a control-suite curve.

1. gym:CartPole-v1: runs `run_on_ray` as `rlplat train impala` does (local
   Ray, the Reverb queue inside the learner, default IMPALAConfig), with
   greedy evaluations every `--eval-every` actor steps, and stops at the first
   one that reaches `--target`. Wall time counts from the call (Ray start, TF
   imports and warm-up included).
2. A control-suite task (`--control-task`, default cartpole:balance; the
   Gaussian policy head): the same layout and default config for a fixed
   wall-time budget (`--control-seconds`, counted from the call), with greedy
   evaluations every `--control-eval-every-s` seconds. The budget is enforced
   the way a user stops a run: SIGINT to this process, which the driver turns
   into a graceful stop. Reports what it reaches; there is no target.

    python bench/impala_learning.py [--target 450] [--num-actors 2] [--max-actor-steps 3000000]
        [--control-task cartpole:balance] [--control-seconds 240] [--skip-control] [--skip-cartpole]

Writes impala_learning.json (figures + eval curves; the control run under
"control") and impala_learning.png (CartPole) and impala_learning_control.png.
With --skip-cartpole the CartPole figures already in the JSON are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
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
    parser.add_argument("--control-task", default="cartpole:balance",
                        help="control-suite domain:task for the learning curve")
    parser.add_argument("--control-seconds", type=float, default=240.0,
                        help="wall-time budget of the control-suite run (from the call)")
    parser.add_argument("--control-eval-every-s", type=float, default=15.0)
    parser.add_argument("--control-eval-episodes", type=int, default=3)
    parser.add_argument("--control-entropy-cost", type=float, default=None,
                        help="entropy cost of the control run (default: IMPALAConfig's)")
    parser.add_argument("--skip-control", action="store_true", help="run only the CartPole part")
    parser.add_argument("--skip-cartpole", action="store_true",
                        help="run only the control-suite part (keeps CartPole figures in the JSON)")
    args = parser.parse_args(argv)
    if args.skip_control and args.skip_cartpole:
        raise SystemExit("--skip-control and --skip-cartpole leave nothing to run; drop one")
    if args.control_seconds <= 0 or args.control_eval_every_s <= 0:
        raise SystemExit("--control-seconds and --control-eval-every-s must be > 0")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "impala_learning.json")
    if args.skip_cartpole:
        if not os.path.exists(path):
            raise SystemExit(f"--skip-cartpole needs CartPole results in {path}; run without it once")
        with open(path) as f:
            report = json.load(f)
    else:
        report = run_cartpole(args)
    if not args.skip_control:
        report["control"] = run_control(args)
        _plot_control(report["control"], os.path.join(args.out, "impala_learning_control.png"))
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    return report


def run_cartpole(args):
    """Part 1: wall time to `--target` on gym:CartPole-v1 (writes the CartPole PNG)."""
    from agents.impala.builder import IMPALABuilder
    from agents.impala.config import IMPALAConfig
    from rlplat.distributed.layout import RayLayoutConfig, run_on_ray

    logdir = args.logdir or tempfile.mkdtemp(prefix="impala_learning_")
    knobs = RayLayoutConfig(eval_every_actor_steps=args.eval_every, eval_episodes=args.eval_episodes,
                            target_eval_return=args.target, checkpoint_every_s=3600.0)
    config = IMPALAConfig()
    load_start = [round(x, 2) for x in os.getloadavg()]
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
        "load_average_start": load_start,
        "logdir": logdir,
    }
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    _plot(report, os.path.join(args.out, "impala_learning.png"))
    if reached:
        print(f"eval return {reached['eval_return']:.1f} >= {args.target:g} after {reached['seconds']:.0f} s, "
              f"{reached['actor_steps']:,} env steps, {reached['learner_steps']:,} learner steps")
    else:
        print(f"target {args.target:g} not reached in {wall_s:.0f} s; "
              f"best {max((p['eval_return'] for p in curve), default=None)}")
    return report


def run_control(args):
    """Part 2: eval return vs env steps and wall time on a control-suite task, fixed wall budget."""
    from agents.impala.builder import IMPALABuilder
    from agents.impala.config import IMPALAConfig
    from rlplat.distributed.layout import RayLayoutConfig, run_on_ray

    logdir = tempfile.mkdtemp(prefix="impala_learning_control_")
    knobs = RayLayoutConfig(eval_every_actor_steps=0, eval_every_s=args.control_eval_every_s,
                            eval_episodes=args.control_eval_episodes, checkpoint_every_s=3600.0)
    config = IMPALAConfig()
    if args.control_entropy_cost is not None:
        config = config.replace(entropy_cost=args.control_entropy_cost)
    load_start = [round(x, 2) for x in os.getloadavg()]
    print(f"{args.control_task}: {args.control_seconds:.0f} s budget, eval every "
          f"{args.control_eval_every_s:g} s, logdir {logdir}", flush=True)
    start = time.time()
    # The budget ends the run as Ctrl-C would: the driver stops gracefully on SIGINT.
    fired = threading.Event()

    def stop():
        fired.set()
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(args.control_seconds, stop)
    timer.daemon = True
    timer.start()
    summary, stopped_by = {}, "max_actor_steps"
    try:
        summary = run_on_ray(IMPALABuilder(config=config), args.control_task, num_actors=args.num_actors,
                             max_actor_steps=args.max_actor_steps * 10, logdir=logdir, seed=args.seed,
                             layout=knobs, console=False)
    except KeyboardInterrupt:  # RunInterrupted, or a bare one if the driver had no handler yet
        if not fired.is_set():
            raise
        stopped_by = "wall-time budget"
    finally:
        timer.cancel()
    wall_s = time.time() - start

    curve, actor_steps, learner_steps, seconds = [], 0, 0, 0.0
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if record.get("role") == "evaluator":
                curve.append({"seconds": record["wall_time"] - start, "actor_steps": record["step"],
                              "learner_steps": record.get("learner_steps"),
                              "eval_return": record["eval_return"]})
            elif record.get("role") == "actor":
                actor_steps, seconds = record["step"], record["wall_time"] - start
            elif record.get("role") == "learner":
                learner_steps = record.get("step", learner_steps)
    best = max(curve, key=lambda p: p["eval_return"]) if curve else None
    baseline = _random_return(args.control_task, args.control_eval_episodes, args.seed)
    if best:
        print(f"{args.control_task}: best eval return {best['eval_return']:.1f} at {best['seconds']:.0f} s "
              f"({best['actor_steps']:,} env steps); final {curve[-1]['eval_return']:.1f} after "
              f"{actor_steps:,} env steps in {wall_s:.0f} s (stopped by the {stopped_by})", flush=True)
    return {
        "env": args.control_task,
        "num_actors": args.num_actors,
        "budget_seconds": args.control_seconds,
        "stopped_by": stopped_by,
        "total_wall_seconds": wall_s,
        "actor_steps": actor_steps,
        "learner_steps": learner_steps,
        "env_steps_per_second_overall": actor_steps / seconds if seconds > 0 else None,
        "final_eval_return": curve[-1]["eval_return"] if curve else None,
        "best_eval_return": best["eval_return"] if best else None,
        "best_at_seconds": best["seconds"] if best else None,
        "best_at_actor_steps": best["actor_steps"] if best else None,
        "eval_episodes": args.control_eval_episodes,
        "random_policy_return": baseline,
        "eval_curve": curve,
        "summary": {k: v for k, v in summary.items() if isinstance(v, (int, float, str, type(None)))},
        "config": config.to_dict(),
        "cpus": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "logdir": logdir,
    }


def _random_return(task, episodes, seed):
    """Mean return of uniform random actions: the floor the curve should rise from."""
    import numpy as np

    from envs import make_environment

    rng = np.random.default_rng(seed)
    total = 0.0
    with make_environment(task, seed=seed) as env:
        spec = env.action_spec()
        for _ in range(episodes):
            timestep = env.reset()
            while not timestep.last():
                timestep = env.step(rng.uniform(spec.minimum, spec.maximum, spec.shape).astype(np.float32))
                total += float(timestep.reward or 0.0)
    return total / episodes


def _plot_control(control, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = control["eval_curve"]
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((ax_t, "seconds", "wall time (s, from the call)"), (ax_s, "actor_steps", "env steps")):
        ax.plot([p[key] for p in curve], [p["eval_return"] for p in curve], marker="o", ms=3, color="tab:orange")
        ax.set_xlabel(label)
        ax.set_ylabel(f"greedy eval return (mean of {control['eval_episodes']})")
        if control.get("random_policy_return") is not None:
            ax.axhline(control["random_policy_return"], color="gray", ls=":", lw=1, label="random actions")
            ax.legend(fontsize=8)
    def fmt(x):
        return "n/a" if x is None else f"{x:.1f}"

    fig.suptitle(f"IMPALA {control['env']} (Gaussian head), {control['num_actors']} actors, {control['cpus']} CPUs, "
                 f"{control['budget_seconds']:.0f} s budget: best {fmt(control['best_eval_return'])}, "
                 f"final {fmt(control['final_eval_return'])}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
