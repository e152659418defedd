"""D4PG system env steps/s against the actors' weight-pull period and mode, paired in one run.

The learning bench records env steps/s per seed, but its seeds run hours apart
on a machine whose load changes, so its rates cannot be compared across
variants. This bench runs short fixed-budget runs of the real Ray layout
(`run_on_ray`, as `rlplat train d4pg`: local Ray, Reverb inside the learner,
2 actors, rate limiter at the config's samples-per-insert, no evaluation),
alternating the pull periods round by round (ABCABC...), so each period sees
the same machine. The rate is taken from the driver's actor-step records
between 25% and 100% of the budget, past start-up and the replay warm-up.

    python bench/d4pg_pull_rate.py [--periods 1000-blocking-ray,10-blocking-ray,10-blocking] [--rounds 2]

A variant is a pull period, with ``-blocking`` for the waiting pull (the
default, ``RayLayoutConfig(prefetch_weights=False)``; without it, the
prefetching pull) and ``-ray`` for pulls over Ray only
(``RayLayoutConfig(shared_weights=False)``; without it, actors on the
learner's host read new versions from shared memory, the default). The
defaults compare the pull of the issue's time (every 1000 steps over Ray)
with a period of 10 over Ray and over shared memory (today's default).
Writes d4pg_pull_rate.json and d4pg_pull_rate.png (env steps/s per variant,
each round a dot, with the ratio to the first variant in the title).
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

BENCH = "d4pg_pull_rate"


def steady_rate(metrics_path: str, total_steps: int, start_fraction: float = 0.25) -> float:
    """Env steps/s between ``start_fraction`` of the budget and the last actor record.

    The driver logs an actor record per finished chunk, its ``step`` being the
    whole system's count, so the rate is the whole system's.
    """
    points = []
    with open(metrics_path) as f:
        for line in f:
            record = json.loads(line)
            if record.get("role") == "actor":
                points.append((record["wall_time"], record["step"]))
    points.sort()
    begin = next((p for p in points if p[1] >= start_fraction * total_steps), None)
    if begin is None or points[-1][0] <= begin[0]:
        raise RuntimeError(f"{metrics_path}: too few actor records for a rate")
    end = points[-1]
    return (end[1] - begin[1]) / (end[0] - begin[0])


def parse_variant(text: str):
    """``"10"`` -> (10, prefetch, shared); ``-blocking`` waits for each pull; ``-ray`` pulls over Ray only.

    ``"1000-blocking-ray"`` is the actors' pull before shared-memory weights:
    a waiting Ray round trip every 1000 steps.
    """
    period, *modes = text.split("-")
    if not period.isdigit() or int(period) < 1 or not set(modes) <= {"blocking", "ray"}:
        raise SystemExit(f"bad variant {text!r}: a positive period, optionally with -blocking and/or -ray")
    return int(period), "blocking" not in modes, "ray" not in modes


def run_one(env: str, variant: str, steps: int, seed: int, num_actors: int) -> dict:
    """One fixed-budget run; its steady env steps/s and the learner's step count."""
    from rlplat_agents.d4pg.builder import D4PGBuilder  # pylint: disable=g-import-not-at-top
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top
    from rlplat.distributed.layout import RayLayoutConfig, run_on_ray  # pylint: disable=g-import-not-at-top

    period, prefetch, shared = parse_variant(variant)
    logdir = tempfile.mkdtemp(prefix=f"{BENCH}_{variant}_")
    knobs = RayLayoutConfig(eval_every_actor_steps=0, eval_episodes=1, checkpoint_every_s=3600.0,
                            prefetch_weights=prefetch, shared_weights=shared)
    start = time.time()
    summary = run_on_ray(D4PGBuilder(config=D4PGConfig(variable_update_period=period)), env,
                         num_actors=num_actors, max_actor_steps=steps, logdir=logdir, seed=seed,
                         console=False, layout=knobs)
    wall_s = time.time() - start
    rate = steady_rate(os.path.join(logdir, "metrics.jsonl"), steps)
    print(f"[{BENCH}] {variant}: {rate:.1f} env steps/s steady, "
          f"{summary['actor_steps'] / wall_s:.1f} over {wall_s:.0f} s with start-up", flush=True)
    return {"variant": variant, "period": period, "prefetch": prefetch, "shared_weights": shared,
            "env_steps_per_s": rate,
            "wall_seconds": wall_s,
            "actor_steps": summary["actor_steps"], "learner_steps": summary.get("learner_steps"),
            "logdir": logdir}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cartpole:swingup")
    parser.add_argument("--periods", default="1000-blocking-ray,10-blocking-ray,10-blocking",
                        help="comma-separated variants: a pull period, -blocking for the waiting pull, -ray "
                             "for pulls over Ray only (no shared-memory weights)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=24_000, help="actor steps per run")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    periods = [p.strip() for p in args.periods.split(",") if p.strip()]
    for variant in periods:
        parse_variant(variant)
    if not periods or args.rounds < 1 or args.steps < 4000:
        raise SystemExit("--periods needs a variant, --rounds >= 1, --steps >= 4000")
    runs = []
    for round_index in range(args.rounds):
        for period in periods:
            record = run_one(args.env, period, args.steps, seed=round_index, num_actors=args.num_actors)
            record["round"] = round_index
            runs.append(record)
    medians = {p: statistics.median(r["env_steps_per_s"] for r in runs if r["variant"] == p) for p in periods}
    report = {"benchmark": BENCH, "env": args.env, "num_actors": args.num_actors, "steps": args.steps,
              "machine": seeds_lib.machine(), "load_after": os.getloadavg(), "runs": runs,
              "median_env_steps_per_s": {str(p): v for p, v in medians.items()},
              "ratio_to_first": {str(p): medians[p] / medians[periods[0]] for p in periods}}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{BENCH}.json"), "w") as f:
        json.dump(report, f, indent=1)
    _plot(report, periods, os.path.join(args.out, f"{BENCH}.png"))
    for p in periods:
        print(f"pull every {p}: median {medians[p]:.1f} env steps/s "
              f"({report['ratio_to_first'][str(p)]:.2f} of every {periods[0]})")
    return report


def _plot(report, periods, path):
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for i, period in enumerate(periods):
        rates = [r["env_steps_per_s"] for r in report["runs"] if r["variant"] == period]
        ax.scatter([i] * len(rates), rates, color="C0")
        ax.hlines(report["median_env_steps_per_s"][str(period)], i - 0.2, i + 0.2, color="C1")
    ax.set_xticks(range(len(periods)), [str(p) for p in periods])
    ax.set_xlabel("actor steps between weight pulls (-blocking: the actor waits for each)")
    ax.set_ylabel("system env steps/s")
    ratios = ", ".join(f"{p}: {report['ratio_to_first'][str(p)]:.2f}" for p in periods)
    ax.set_title(f"D4PG {report['env']}, {report['num_actors']} actors\nratio to {periods[0]}: {ratios}",
                 fontsize=9)
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
