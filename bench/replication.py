"""Replication-core overhead: the supervised step through the Replicator vs a plain loop.

Measures steps/s and examples/s of the digits classifier's training step at
1, 2 and 4 replicas (logical CPU devices), and the same step in a plain
`tf.function` with no strategy at all, in one process and one run. Modes are
interleaved round by round and the median is kept, because this machine is
shared and noisy; only ratios from the same run are meaningful.

Two dispatch styles are measured for each:
  per_call  one Python call per step (`Replicator.run` vs a `tf.function`);
  in_graph  K steps per call (`Replicator.run_steps` vs a `tf.range` loop).

    python bench/replication.py [--rounds 5] [--steps 200] [--out bench/results]

Writes replication.json and replication.png under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import seeds  # noqa: E402
from rlplat.utils import tf_setup  # noqa: E402

REPLICA_COUNTS = (1, 2, 4)


def _plain_runner(config, tf):
    """The learner's own step_fn in a bare tf.function: no strategy, no Replicator.

    Outside any strategy the primitives act as one replica (identity), so this
    is exactly the replicated step minus what the core adds around it.
    """
    from rlplat_agents.supervised import data
    from rlplat_agents.supervised.learning import SupervisedLearner
    from rlplat import replication

    learner = SupervisedLearner(config, replication.Replicator(tf.distribute.get_strategy()))
    iterator = iter(data.make_input_fn(config.global_batch_size, config.seed)(tf.distribute.InputContext()))
    per_call = tf.function(learner.step_fn)

    @tf.function
    def in_graph(it, n):
        out = learner.step_fn(next(it))
        for _ in tf.range(n - 1):
            out = learner.step_fn(next(it))
        return out

    return {
        "per_call": lambda k: [per_call(next(iterator)) for _ in range(k)][-1]["loss"].numpy(),
        "in_graph": lambda k: in_graph(iterator, tf.constant(k))["loss"].numpy(),
    }


def _replicated_runner(config, num_replicas):
    from rlplat_agents.supervised import data
    from rlplat_agents.supervised.learning import SupervisedLearner
    from rlplat import replication

    repl = replication.make_replicator(num_replicas=num_replicas)
    learner = SupervisedLearner(config, repl)
    iterator = repl.distribute(data.make_input_fn(config.global_batch_size, config.seed))
    return {
        "per_call": lambda k: [repl.run(learner.step_fn, next(iterator)) for _ in range(k)][-1]["loss"].numpy(),
        "in_graph": lambda k: repl.run_steps(learner.step_fn, iterator, k)["loss"].numpy(),
    }


def _time(fn, steps):
    start = time.perf_counter()
    fn(steps)
    return steps / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200, help="steps per timed block")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)

    tf_setup.configure_tensorflow(num_cpu_replicas=max(REPLICA_COUNTS))
    tf = tf_setup.import_tensorflow()
    from rlplat_agents.supervised.config import SupervisedConfig

    config = SupervisedConfig()
    runners = {"plain": _plain_runner(config, tf)}
    for n in REPLICA_COUNTS:
        runners[f"replicator_{n}"] = _replicated_runner(config, n)
    for runner in runners.values():  # trace and warm up every path first
        for fn in runner.values():
            fn(20)

    samples = {name: {style: [] for style in runner} for name, runner in runners.items()}
    for r in range(args.rounds):
        for name, runner in runners.items():
            for style, fn in runner.items():
                samples[name][style].append(_time(fn, args.steps))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n}/{s} {v[-1]:.0f}" for n, d in samples.items() for s, v in d.items()), flush=True)

    results = {}
    for name, by_style in samples.items():
        results[name] = {}
        for style, values in by_style.items():
            steps_per_s = statistics.median(values)
            results[name][style] = {
                "steps_per_s": steps_per_s,
                "examples_per_s": steps_per_s * config.global_batch_size,
                "samples": values,
            }
    # Paired per round: adjacent blocks see the same background load, so the
    # median of per-round ratios is steadier than a ratio of medians.
    overhead = {
        style: statistics.median(
            p / r - 1.0 for p, r in zip(samples["plain"][style], samples["replicator_1"][style]))
        for style in ("per_call", "in_graph")
    }
    report = {
        "benchmark": "replication",
        "global_batch_size": config.global_batch_size,
        "steps_per_block": args.steps,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "machine": seeds.machine(),  # the CPU model: figures depend on it
        "results": results,
        "overhead_at_1_replica": overhead,
        "load_average_1min": os.getloadavg()[0],
        "note": "overhead = median over rounds of (plain steps/s / replicator_1 steps/s - 1), rounds interleaved",
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "replication.json"), "w") as f:
        json.dump(report, f, indent=2)
    _plot(report, os.path.join(args.out, "replication.png"))
    for style, value in overhead.items():
        print(f"overhead at 1 replica ({style}): {100 * value:+.1f}%")
    return report


def _plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["results"])
    styles = ("per_call", "in_graph")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.38
    for i, style in enumerate(styles):
        values = [report["results"][n][style]["examples_per_s"] for n in names]
        bars = ax.bar([x + (i - 0.5) * width for x in range(len(names))], values, width, label=style)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("examples / s (median)")
    oh = report["overhead_at_1_replica"]
    ax.set_title(f"Supervised step, global batch {report['global_batch_size']}, {report['cpus']} CPUs; "
                 f"1-replica overhead {100 * oh['per_call']:+.1f}% / {100 * oh['in_graph']:+.1f}%", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
