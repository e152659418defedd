"""IMPALA learning over seeds on the real Ray layout: gym:CartPole-v1 and control-suite tasks.

Each seed runs `run_on_ray` exactly as `rlplat train impala` does (local Ray,
the Reverb queue inside the learner, 2 actors, the default IMPALAConfig
unless `--set` changes it), with greedy evaluations every `--eval-every`
actor steps (`--eval-episodes` each, logged at the step of the weights they
used). Seeds run one after another; each seed's record is kept in
results/runs/ and reused by a later call with the same settings, so an
interrupted sweep resumes.

1. CartPole (`--part cartpole`): gym:CartPole-v1 to `--cartpole-steps`
   (default 1M) WITHOUT stopping at the target, so that the record shows
   whether the policy holds it: the summary gives median and worst env steps
   to `--cartpole-target` (475) and the mean of the last 3 evals
   ("final_return"; the bar is 450).
2. Control suite (`--part control`): each `--task DOMAIN:TASK=TARGET@STEPS`
   (TARGET "none" for a task that is only reported) stops at its target or
   at STEPS env steps. The random-policy return is measured per task.

    python bench/impala_learning.py --seeds 3 [--part all|cartpole|control]
        [--task cartpole:balance=900@3000000 ...] [--variant NAME --set FIELD=VALUE ...]
        [--eval-every 50000] [--eval-episodes 5] [--no-reuse] [--report-only]

Writes impala_learning.json (per environment and variant: settings, summary,
the seeds' curves), impala_learning.png (CartPole) and
impala_learning_control.png (every control task: mean and min-max band over
seeds against env steps and wall time; control-suite returns share the
0-1000 scale). The summary lines are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import seeds as seeds_lib  # noqa: E402

BENCH = "impala_learning"
CARTPOLE = "gym:CartPole-v1"
DEFAULT_TASKS = ("cartpole:balance=900@3000000", "cartpole:swingup=600@5000000",
                 "walker:walk=none@3000000")


def _parse_sets(pairs):
    from rlplat_agents.impala.config import IMPALAConfig  # pylint: disable=g-import-not-at-top  (no TF)

    return seeds_lib.parse_overrides(IMPALAConfig, pairs)


def _parse_task(text):
    """"domain:task=TARGET@STEPS" -> (env, target or None, steps)."""
    env, sep, rest = text.partition("=")
    target, sep2, steps = rest.partition("@")
    if not (sep and sep2 and env and steps.isdigit()):
        raise SystemExit(f"--task {text!r}: expected DOMAIN:TASK=TARGET@STEPS, e.g. "
                         "cartpole:balance=900@3000000 (TARGET may be 'none')")
    return env, None if target == "none" else float(target), int(steps)


def slug(env: str) -> str:
    """A file-name-safe form of an environment name."""
    return env.replace("gym:", "").replace(":", "_")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "cartpole", "control"), default="all")
    parser.add_argument("--cartpole-target", type=float, default=475.0)
    parser.add_argument("--cartpole-steps", type=int, default=1_000_000,
                        help="env steps of each CartPole run (it does not stop at the target)")
    parser.add_argument("--cartpole-eval-every", type=int, default=20_000)
    parser.add_argument("--task", action="append", default=None, metavar="DOMAIN:TASK=TARGET@STEPS",
                        help=f"control task (repeatable; default: {' '.join(DEFAULT_TASKS)})")
    parser.add_argument("--eval-every", type=int, default=50_000,
                        help="actor steps between evaluations (control tasks)")
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--num-actors", type=int, default=2)
    seeds_lib.add_sweep_arguments(parser, "IMPALAConfig",
                                  os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    overrides = _parse_sets(args.set)
    runs = []  # (env, target, steps, eval_every, stop_at_target)
    if args.part in ("all", "cartpole"):
        runs.append((CARTPOLE, args.cartpole_target, args.cartpole_steps, args.cartpole_eval_every, False))
    if args.part in ("all", "control"):
        for text in args.task or DEFAULT_TASKS:
            env, target, steps = _parse_task(text)
            runs.append((env, target, steps, args.eval_every, True))
    if not args.report_only:
        seed_list = seeds_lib.seed_list(args)
        for env, target, steps, eval_every, stop in runs:
            settings = {"env": env, "target": target, "stop_at_target": stop,
                        "num_actors": args.num_actors, "max_actor_steps": steps,
                        "eval_every": eval_every, "eval_episodes": args.eval_episodes,
                        "overrides": overrides}
            records = seeds_lib.run_seeds(
                args.out, BENCH, f"{slug(env)}-{args.variant}", seed_list, settings,
                lambda seed, s=settings: run_one(s, args.variant, seed), reuse=not args.no_reuse)
            summary = seeds_lib.summarise(records, target, steps)
            print(seeds_lib.summary_line(f"IMPALA {env} [{args.variant}]", summary)
                  + f"; final return (mean of last 3 evals) {summary['final_return_mean']:.1f}", flush=True)
    return write_report(args.out)


def run_one(settings, variant, seed):
    """One training run; its eval curve, rates and (control suite) the random-policy return."""
    from rlplat_agents.impala.builder import IMPALABuilder  # pylint: disable=g-import-not-at-top
    from rlplat_agents.impala.config import IMPALAConfig  # pylint: disable=g-import-not-at-top
    from rlplat.runners import Experiment, RayLayoutConfig, run_on_ray  # pylint: disable=g-import-not-at-top

    env, target = settings["env"], settings["target"]
    logdir = tempfile.mkdtemp(prefix=f"{BENCH}_{slug(env)}_s{seed}_")
    config = IMPALAConfig(**settings["overrides"])
    print(f"[{BENCH}/{slug(env)}-{variant}] seed {seed}: logdir {logdir}", flush=True)
    start = time.time()
    experiment = Experiment(IMPALABuilder(config=config), env, num_actors=settings["num_actors"],
                            max_actor_steps=settings["max_actor_steps"], logdir=logdir, seed=seed,
                            eval_every_actor_steps=settings["eval_every"], eval_episodes=settings["eval_episodes"],
                            target_eval_return=target if settings["stop_at_target"] else None,
                            checkpoint_every_s=3600.0)
    summary = run_on_ray(experiment, RayLayoutConfig(console=False))
    wall_s = time.time() - start
    records = seeds_lib.read_metrics(logdir)
    curve = seeds_lib.eval_curve(records, start)
    lags = [r["policy_lag_mean"] for r in records if r.get("role") == "learner" and "policy_lag_mean" in r]
    hit = seeds_lib.first_reaching(curve, target)
    best = max((p["eval_return"] for p in curve), default=None)
    print(f"[{BENCH}/{slug(env)}-{variant}] seed {seed}: "
          + (f"{hit['eval_return']:.1f} at {hit['actor_steps']:,} env steps, {hit['seconds']:.0f} s"
             if hit else f"target not reached; best {best}")
          + (f"; last 3 evals {[round(p['eval_return'], 1) for p in curve[-3:]]}" if curve else ""),
          flush=True)
    return {"eval_curve": curve, "total_wall_seconds": wall_s, "config": config.to_dict(),
            "env_steps_per_s": summary["actor_steps"] / wall_s,
            "mean_policy_lag": sum(lags) / len(lags) if lags else None,
            "random_policy_return": None if env.startswith("gym:") else random_return(env, 5, seed),
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "summary": seeds_lib.scalar_summary(summary),
            "logdir": logdir}


def random_return(task, episodes, seed):
    """Mean return of uniform random actions: the floor a control-suite curve should rise from."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    from rlplat_envs import make_environment  # pylint: disable=g-import-not-at-top

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


def write_report(out_dir):
    """Rebuilds impala_learning.json and its PNGs from every recorded seed of every variant."""
    groups = seeds_lib.recorded_variants(out_dir, BENCH)
    report = {"benchmark": BENCH, "variants": {}, "machine": seeds_lib.machine()}
    for name, records in sorted(groups.items()):
        settings = records[-1]["settings"]
        records = [r for r in records if r["settings"] == settings]
        summary = seeds_lib.summarise(records, settings["target"], settings["max_actor_steps"])
        summary["env_steps_per_s_median"] = statistics.median(r["env_steps_per_s"] for r in records)
        randoms = [r["random_policy_return"] for r in records if r.get("random_policy_return") is not None]
        report["variants"][name] = {
            "settings": settings, "summary": summary,
            "random_policy_return": sum(randoms) / len(randoms) if randoms else None,
            "machines": sorted({r["machine"]["cpu_model"] for r in records}),
            "seeds": [{"seed": r["seed"], "eval_curve": r["eval_curve"],
                       "total_wall_seconds": r["total_wall_seconds"],
                       "env_steps_per_s": r["env_steps_per_s"],
                       "random_policy_return": r.get("random_policy_return")} for r in records]}
        print(seeds_lib.summary_line(f"  {name}", summary)
              + f"; final return {summary['final_return_mean']:.1f}")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{BENCH}.json"), "w") as f:
        json.dump(report, f, indent=1)
    cartpole = {k: v["seeds"] for k, v in report["variants"].items() if v["settings"]["env"] == CARTPOLE}
    control = {f"{v['settings']['env']} [{k.split('-', 1)[1]}]": v["seeds"]
               for k, v in report["variants"].items() if v["settings"]["env"] != CARTPOLE}
    if cartpole:
        target = next(iter(report["variants"][k] for k in cartpole))["settings"]["target"]
        seeds_lib.plot_band(cartpole, target, f"IMPALA {CARTPOLE}, 2 actors",
                            os.path.join(out_dir, f"{BENCH}.png"))
    if control:
        targets = ", ".join(sorted({f"{v['settings']['env']} {v['settings']['target']:g}"
                                    for v in report["variants"].values()
                                    if v["settings"]["env"] != CARTPOLE and v["settings"]["target"]}))
        seeds_lib.plot_band(control, None, f"IMPALA control suite, Gaussian head (targets: {targets})",
                            os.path.join(out_dir, f"{BENCH}_control.png"))
    return report


if __name__ == "__main__":
    main()
