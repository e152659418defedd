"""Replay item format: packed transitions vs one column per field, side by side.

Writes the same n-step transitions of a control-suite task through the real
``NStepTransitionAdder`` into two tables of one in-process Reverb server (one
table packed, one with a column per field) and samples global batches from
each through the real ``make_transition_dataset``. Formats alternate round by
round and medians are kept, so the ratio is measured under the same load.

Reported per format: CPU microseconds per written item (the actor's cost:
adder + Reverb writer threads) and CPU milliseconds per sampled batch (the
learner's cost: sampler threads, colocated server, tf.data batching and the
unpack). CPU is process CPU time, so background threads are included.

    python bench/replay_packing.py [--rounds 5] [--items 20000] [--out bench/results]

Writes replay_packing.json and replay_packing.png under --out.
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

FORMATS = ("packed", "columns")


def _transitions(env_name, num_steps, seed):
    """Real observations of ``env_name`` under random actions, as (action, timestep) lists."""
    import numpy as np

    from rlplat_envs import make_environment

    rng = np.random.default_rng(seed)
    episodes, steps = [], 0
    with make_environment(env_name, seed=seed) as env:
        spec = env.action_spec()
        while steps < num_steps:
            timestep = env.reset()
            episode = [timestep]
            while not timestep.last() and steps < num_steps:
                action = rng.uniform(spec.minimum, spec.maximum, spec.shape).astype(np.float32)
                timestep = env.step(action)
                episode.append((action, timestep))
                steps += 1
            episodes.append(episode)
    return episodes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="cartpole:swingup")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--items", type=int, default=20_000, help="transitions written per round")
    parser.add_argument("--batches", type=int, default=100, help="batches sampled per round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args()

    from rlplat.utils import tf_setup

    tf_setup.configure_tensorflow(intra_op_threads=1, inter_op_threads=1)
    import reverb

    from rlplat_agents.d4pg.builder import D4PGBuilder
    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat_envs import make_environment
    from rlplat import specs
    from rlplat.replay import datasets, server as replay_server

    with make_environment(args.env, seed=args.seed) as env:
        spec = specs.make_environment_spec(env)
    builders = {"packed": D4PGBuilder(D4PGConfig(), replay_table="packed"),
                "columns": D4PGBuilder(D4PGConfig(), replay_table="columns", pack_transitions=False)}
    tables = []
    for builder in builders.values():
        (table,) = builder.make_replay_tables(spec, 1)
        # MinSize: nothing may block here; the item format is what is measured.
        tables.append(table.replace(rate_limiter=reverb.rate_limiters.MinSize(1)))
    server = replay_server.make_server(tables)
    address = f"127.0.0.1:{server.port}"
    episodes = _transitions(args.env, args.items, args.seed)
    batch_size = D4PGConfig().global_batch_size
    iterators = {}
    results = {name: {"write_cpu_us_per_item": [], "sample_cpu_ms_per_batch": []} for name in FORMATS}

    for r in range(args.rounds):
        for name in FORMATS if r % 2 == 0 else reversed(FORMATS):
            builder = builders[name]
            adder = builder.make_adder(address, spec)
            cpu0 = time.process_time()
            for episode in episodes:
                adder.add_first(episode[0])
                for action, timestep in episode[1:]:
                    adder.add(action, timestep)
            adder.close()
            results[name]["write_cpu_us_per_item"].append(
                1e6 * (time.process_time() - cpu0) / adder.num_items)
            if name not in iterators:
                iterators[name] = iter(datasets.make_transition_dataset(
                    address, builder.replay_table, batch_size,
                    signature=builder.replay().item_format(spec)["signature"],
                    packing=builder.make_packing(spec), rate_limiter_timeout_ms=30_000))
                for _ in range(10):
                    next(iterators[name])
            cpu0 = time.process_time()
            for _ in range(args.batches):
                next(iterators[name])
            results[name]["sample_cpu_ms_per_batch"].append(
                1e3 * (time.process_time() - cpu0) / args.batches)
        print(f"round {r + 1}: " + ", ".join(
            f"{n} write {results[n]['write_cpu_us_per_item'][-1]:.1f} us/item, "
            f"sample {results[n]['sample_cpu_ms_per_batch'][-1]:.2f} ms/batch" for n in FORMATS),
            flush=True)
    iterators.clear()
    server.stop()

    median = {n: {k: statistics.median(v) for k, v in results[n].items()} for n in FORMATS}
    report = {
        "benchmark": "replay_packing",
        "command": "python bench/replay_packing.py " + " ".join(sys.argv[1:]),
        "env": args.env,
        "machine": seeds.machine(),  # the CPU model: figures depend on it
        "transition_floats": builders["packed"].make_packing(spec).size,
        "batch_size": batch_size,
        "rounds": args.rounds,
        "items_per_round": args.items,
        "median": median,
        "write_cost_ratio_columns_over_packed": (median["columns"]["write_cpu_us_per_item"]
                                                 / median["packed"]["write_cpu_us_per_item"]),
        "sample_cost_ratio_columns_over_packed": (median["columns"]["sample_cpu_ms_per_batch"]
                                                  / median["packed"]["sample_cpu_ms_per_batch"]),
        "per_round": results,
        "load_average": os.getloadavg(),
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "replay_packing.json"), "w") as f:
        json.dump(report, f, indent=1)
    _plot(report, os.path.join(args.out, "replay_packing.png"))
    print(json.dumps({k: report[k] for k in ("median", "write_cost_ratio_columns_over_packed",
                                             "sample_cost_ratio_columns_over_packed")}, indent=1))


def _plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in ((axes[0], "write_cpu_us_per_item", "actor: CPU us per written item"),
                           (axes[1], "sample_cpu_ms_per_batch",
                            f"learner: CPU ms per batch of {report['batch_size']}")):
        for i, name in enumerate(FORMATS):
            values = report["per_round"][name][key]
            ax.bar(i, report["median"][name][key], color=("tab:blue", "tab:gray")[i], alpha=0.7)
            ax.plot([i] * len(values), values, "k.", ms=4)
        ax.set_xticks(range(len(FORMATS)), FORMATS)
        ax.set_title(label, fontsize=10)
    fig.suptitle(f"Replay item format, {report['env']} ({report['transition_floats']} floats "
                 f"per transition; dots: rounds, bars: median)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
