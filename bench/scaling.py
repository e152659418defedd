"""D4PG env steps/s against the number of actors (measured), and a cluster model built from measured costs.

1. **Measured here** (``--measure``; cartpole:swingup, real Ray, real Reverb):
   for N = 1, 2, 4, 8 actor processes,
   - *learner off* (pure acting): N real ``ActorWorker`` s against the stand-in
     learner of ``d4pg_throughput.py`` (it serves weights and hosts Reverb with
     a size-only limiter), env steps/s over a window of chunks;
   - *learner on*: the real run (``run_on_ray``, default config), env steps/s
     over the steady part (after a quarter of the steps).
   On a 2-core machine both flatten once the cores are busy; the model below
   says what the same costs give on a cluster.
2. **Model** (always; no figure in it is typed by hand): from the JSON of the
   other benches (``d4pg_throughput``: an actor's CPU per step; ``replay_capacity``:
   a Reverb server core's inserts/s at samples-per-insert 32;
   ``learner_roofline``: learner steps/s on this CPU and the GPU proxy), for N
   actor nodes of C cores, S replay servers and a learner on CPU or GPU, each
   stage's ceiling in env steps/s:
   - acting: N x C actor processes x one actor's env steps per CPU-second;
   - replay: S x one server core's inserts/s (each insert also pays for its
     32 sampled items);
   - learner: learner steps/s x batch / samples-per-insert;
   - network: the learner node's NIC, which receives every insert, sends every
     sampled item and sends each new weight version to every remote actor.
   The system runs at the lowest ceiling; the table names it for N = 1..64 and
   the text names the first stage to break as N grows.

Writes scaling.json, scaling.png and scaling.md under --out.

    python bench/scaling.py [--measure] [--cores-per-node 16] [--nic-gbit 10]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

ACTOR_COUNTS = (1, 2, 4, 8)
NODE_COUNTS = (1, 2, 4, 8, 16, 32, 64)


def _load(name: str) -> Dict[str, Any]:
    with open(os.path.join(HERE, "results", name)) as f:
        return json.load(f)


# -------------------------------------------------------------------- measure
def measure(args, log) -> Dict[str, Any]:
    """Env steps/s of N actors with the learner off and on (this machine)."""
    import ray

    import d4pg_throughput as throughput
    from rlplat_agents.d4pg.builder import D4PGBuilder
    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat_envs import make_environment
    from rlplat import specs
    from rlplat import seeding
    from rlplat.distributed import cluster, process, workers
    from rlplat.runners import EnvironmentFactory, Experiment, RayLayoutConfig, run_on_ray

    builder = D4PGBuilder(config=D4PGConfig())
    with make_environment(args.env, seed=0) as env:
        spec = specs.make_environment_spec(env)
    chunk = RayLayoutConfig().actor_chunk_steps
    off: Dict[str, float] = {}
    conn = cluster.connect(None)
    StandInLearner, ActorWorker, _ = throughput.actor_classes()
    name = f"scaling-learner-{os.getpid()}"
    learner = workers.remote(StandInLearner, num_cpus=0, max_concurrency=8, name=name,
                             runtime_env=process.runtime_env("learner")).remote(builder, spec, max(ACTOR_COUNTS))
    actor_cls = workers.remote(ActorWorker, num_cpus=0, max_restarts=0, runtime_env=process.runtime_env("actor"))
    actors = [actor_cls.remote(builder, EnvironmentFactory(args.env), i, seeding.actor_seed(0, i), name, None)
              for i in range(max(ACTOR_COUNTS))]
    ray.get([a.info.remote() for a in actors], timeout=600)
    ray.get([a.run_steps.remote(chunk) for a in actors], timeout=600)  # warm-up
    for n in ACTOR_COUNTS:
        t0 = time.perf_counter()
        ray.get([a.run_steps.remote(args.chunks * chunk) for a in actors[:n]], timeout=3600)
        off[str(n)] = n * args.chunks * chunk / (time.perf_counter() - t0)
        log(f"learner off, {n} actors: {off[str(n)]:.0f} env steps/s")
    for handle in actors + [learner]:
        ray.kill(handle, no_restart=True)
    cluster.disconnect(conn)

    on: Dict[str, float] = {}
    for n in ACTOR_COUNTS:
        import tempfile

        logdir = tempfile.mkdtemp(prefix=f"scaling_on_{n}_")
        run_on_ray(Experiment(builder, args.env, num_actors=n, max_actor_steps=args.on_steps, logdir=logdir,
                              seed=0, eval_every_actor_steps=0, checkpoint_every_s=3600.0),
                   RayLayoutConfig(console=False))
        on[str(n)] = _steady_rate(logdir, args.on_steps)
        log(f"learner on, {n} actors: {on[str(n)]:.0f} env steps/s")
    return {"env": args.env, "learner_off_env_steps_per_s": off, "learner_on_env_steps_per_s": on,
            "chunks_per_actor": args.chunks, "learner_on_steps": args.on_steps}


def _steady_rate(logdir: str, total: int) -> float:
    """Env steps/s between a quarter of the run and its end, from the driver's actor records."""
    points = []
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("role") == "actor" and "step" in r and "wall_time" in r:
                points.append((r["step"], r["wall_time"]))
    points = [p for p in points if p[0] >= total // 4]
    if len(points) < 2:
        return float("nan")
    (s0, t0), (s1, t1) = points[0], points[-1]
    return (s1 - s0) / max(t1 - t0, 1e-9)


# ---------------------------------------------------------------------- model
def costs() -> Dict[str, Any]:
    """The measured per-unit costs the model uses, with where each came from."""
    from rlplat_agents.d4pg.config import D4PGConfig

    cfg = D4PGConfig()
    tp, cap, roof = _load("d4pg_throughput.json"), _load("replay_capacity.json"), _load("learner_roofline.json")
    # The GPU proxy's speed depends on how its step is launched: eager kernels (the slow end) or one
    # captured CUDA graph (the fast end); the model carries both.
    gpu = {name: _load(f"{stem}.json") for name, stem in (("gpu eager", "learner_roofline_gpu_cartpole"),
                                                          ("gpu graph", "learner_roofline_gpu_graph_cartpole"))
           if os.path.exists(os.path.join(HERE, "results", f"{stem}.json"))}
    obs, act = roof["settings"]["obs_size"], roof["settings"]["action_size"]
    widths = [obs, *cfg.policy_layer_sizes, act]
    policy_floats = sum(a * b + b for a, b in zip(widths, widths[1:]))  # the default policy's weights
    return {
        "actor_env_steps_per_cpu_s": tp["actor"]["results"]["1"]["actor_steps_per_cpu_s"],
        "replay_inserts_per_s_per_server_core": cap["capacity"]["inserts_per_s_per_server_core"],
        "learner_steps_per_s": {"cpu": roof["learner_steps_per_s"],
                                **{name: d["learner_steps_per_s"] for name, d in gpu.items()}},
        "gpu_device": next(iter(gpu.values()))["device"] if gpu else None,
        "batch": cfg.global_batch_size, "samples_per_insert": cfg.samples_per_insert,
        "item_bytes": 4 * (2 * obs + act + 2),  # a packed n-step transition, float32
        "policy_bytes": 4 * policy_floats,
        "sources": {"actor": "d4pg_throughput.json actor.results.1", "replay": "replay_capacity.json capacity",
                    "learner": "learner_roofline.json, learner_roofline_gpu_cartpole.json (eager), "
                               "learner_roofline_gpu_graph_cartpole.json (CUDA graph)"},
        "machine": tp.get("machine") or roof["machine"],
    }


def model(c: Dict[str, Any], nodes: int, cores: int, servers: int, learner: str, nic_gbit: float,
          publish_period: int = 1, per_node: bool = True) -> Dict[str, Any]:
    """Each stage's ceiling in env steps/s for one cluster shape, the bottleneck, and the weights' lag.

    Data first: the learner node's NIC carries each insert in and its sampled
    copies out (replay lives with the learner), which sets the network's
    ceiling. Weights get what the data leaves: the learner publishes a version
    every ``publish_period`` learner steps, and each version leaves the NIC
    once per node (``per_node``, as built) or once per actor. Where that does
    not fit, fewer versions reach each node and the actors' lag grows; the run
    does not stop.
    """
    nic = nic_gbit * 1e9 / 8  # bytes/s
    actors = nodes * cores
    bytes_per_step = c["item_bytes"] * (1 + c["samples_per_insert"])
    ceilings = {
        "acting": actors * c["actor_env_steps_per_cpu_s"],
        "replay": servers * c["replay_inserts_per_s_per_server_core"],
        "learner": c["learner_steps_per_s"][learner] * c["batch"] / c["samples_per_insert"],
        "network": nic / bytes_per_step,
    }
    bottleneck = min(ceilings, key=ceilings.get)
    env_rate = ceilings[bottleneck]
    learner_rate = env_rate * c["samples_per_insert"] / c["batch"]  # learner steps/s at the system's rate
    published = learner_rate / publish_period
    room = max(0.0, nic - env_rate * bytes_per_step)
    copies = nodes if per_node else actors
    delivered = min(published, room / (copies * c["policy_bytes"]))
    # Learner steps between two versions an actor can get: the most it acts behind the learner.
    lag = learner_rate / delivered if delivered > 0 else float("inf")
    return {"nodes": nodes, "cores_per_node": cores, "actors": actors, "servers": servers, "learner": learner,
            "publish_period": publish_period, "per_node": per_node,
            "ceilings": ceilings, "env_steps_per_s": env_rate, "bottleneck": bottleneck,
            "learner_steps_per_s": learner_rate, "versions_per_s_published": published,
            "versions_per_s_per_node": delivered, "lag_learner_steps": lag, "nic_binds_weights": delivered < published,
            "weight_bytes_per_s": copies * delivered * c["policy_bytes"], "nic_bytes_per_s": nic}


def table(c, cores, servers, learner, nic_gbit, publish_period=1, per_node=True) -> List[Dict[str, Any]]:
    return [model(c, n, cores, servers, learner, nic_gbit, publish_period, per_node) for n in NODE_COUNTS]


def first_break(rows: List[Dict[str, Any]]) -> str:
    """Where the bottleneck sits as actor nodes are added, e.g. "learner at 1-4 nodes, network from 8"."""
    spans: List[List[Any]] = []
    for r in rows:
        if spans and spans[-1][0] == r["bottleneck"]:
            spans[-1][2] = r["nodes"]
        else:
            spans.append([r["bottleneck"], r["nodes"], r["nodes"]])
    return ", then ".join(f"{name} at {lo}" + (f"-{hi}" if hi != lo else "") + " node(s)"
                          for name, lo, hi in spans)


def render(report: Dict[str, Any]) -> str:
    c = report["costs"]
    lines = ["# Scaling: measured on this machine, modelled for a cluster", "",
             "Generated by `python bench/scaling.py` from `bench/results/scaling.json` and the JSON of "
             "`d4pg_throughput`, `replay_capacity` and `learner_roofline`; do not edit by hand.", "",
             f"Machine of the measured costs: {c['machine'].get('cpu_model')} ({c['machine'].get('cpus')} cores).",
             ""]
    m = report.get("measured")
    if m:
        lines += ["## Measured here (D4PG, cartpole:swingup)", "",
                  "| actors | env steps/s, learner off | env steps/s, learner on |", "|---|---|---|"]
        for n in ACTOR_COUNTS:
            lines.append(f"| {n} | {m['learner_off_env_steps_per_s'][str(n)]:,.0f} | "
                         f"{m['learner_on_env_steps_per_s'][str(n)]:,.0f} |")
        lines.append("")
    speeds = c["learner_steps_per_s"]
    lines += ["## Costs the model uses", "",
              f"- one actor process: {c['actor_env_steps_per_cpu_s']:,.0f} env steps per CPU-second",
              f"- one Reverb server core: {c['replay_inserts_per_s_per_server_core']:,.0f} inserts/s "
              f"with their {c['samples_per_insert']:g} sampled items each",
              "- learner steps/s: " + "; ".join(f"{_LEARNERS.get(k, k).format(gpu=c['gpu_device'])} {v:,.0f}"
                                                for k, v in speeds.items()),
              f"- {c['item_bytes']} bytes per transition, {c['policy_bytes'] / 1e3:,.0f} kB of policy weights "
              "per version", ""]
    for key, rows in report["model"].items():
        lines += [f"## Model: {key}", "", "| actor nodes | actors | acting | replay | learner | network | "
                  "env steps/s | bottleneck | versions/s to each node | lag (learner steps) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            ce = r["ceilings"]
            lag = f"{r['lag_learner_steps']:,.0f}" + (" (NIC-bound)" if r["nic_binds_weights"] else "")
            lines.append(f"| {r['nodes']} | {r['actors']} | {ce['acting']:,.0f} | {ce['replay']:,.0f} | "
                         f"{ce['learner']:,.0f} | {ce['network']:,.0f} | {r['env_steps_per_s']:,.0f} | "
                         f"{r['bottleneck']} | {r['versions_per_s_per_node']:,.1f} | {lag} |")
        lines += ["", f"The bottleneck as actor nodes are added: **{first_break(rows)}**.", ""]
    lines += ["Assumptions: one core per actor process and per Reverb server; replay on the learner's node, "
              "so its NIC carries inserts and samples first, and the weights get what is left: each "
              "published version leaves it once per actor node (rlplat's per-node path) or once per actor "
              "(`--weights-per-actor`). Where the weights do not fit, fewer versions reach each node and "
              "the lag (learner steps between two versions an actor can get; the most it acts behind) "
              "grows; the run goes on. Network and protocol overheads are not counted.", "",
              "Reading: on a CPU learner the learner binds from the first node. A GPU learner publishing "
              "every step sends versions/s x nodes x policy bytes; once per actor that fills a 10 Gbit/s "
              "NIC at the first node and the lag runs to hundreds of learner steps, once per node it "
              "grows with the node count; `--weight-publish-period` bounds the traffic, and the lag is "
              "then the period.", ""]
    return "\n".join(lines)


_LEARNERS = {"cpu": "this CPU", "gpu eager": "{gpu} proxy, eager", "gpu graph": "{gpu} proxy, CUDA graph"}
# (learner, replay servers, publish period, weights once per node): the shapes the model is run for.
_SHAPES = (("cpu", 1, 1, True), ("gpu eager", 4, 1, True), ("gpu graph", 4, 1, False), ("gpu graph", 4, 1, True),
           ("gpu graph", 4, 100, True))


def plot(report: Dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import textwrap

    keys = list(report["model"])
    cols = min(3, len(keys))
    rows_n = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.5 * cols, 4.2 * rows_n), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, keys):
        rows = report["model"][key]
        n = [r["nodes"] for r in rows]
        for stage in ("acting", "replay", "learner", "network"):
            ax.plot(n, [max(r["ceilings"][stage], 1.0) for r in rows], "--", label=stage)
        ax.plot(n, [r["env_steps_per_s"] for r in rows], "k-", lw=2, label="system")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("actor nodes")
        ax.set_ylabel("env steps/s")
        ax.set_title("\n".join(textwrap.wrap(key, 60)), fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", action="store_true", help="also run part 1 here (about 10 minutes)")
    parser.add_argument("--env", default="cartpole:swingup")
    parser.add_argument("--chunks", type=int, default=4, help="learner off: chunks of 1000 steps per actor")
    parser.add_argument("--on-steps", type=int, default=30_000, help="learner on: env steps per run")
    parser.add_argument("--cores-per-node", type=int, default=16)
    parser.add_argument("--nic-gbit", type=float, default=10.0)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    started = time.time()

    def log(msg):
        print(f"[{time.time() - started:6.1f}s] {msg}", flush=True)

    path = os.path.join(args.out, "scaling.json")
    report: Dict[str, Any] = {"benchmark": "scaling"}
    if os.path.exists(path):
        with open(path) as f:
            report = json.load(f)
    if args.measure:
        from seeds import machine

        report["measured"] = measure(args, log)
        report["measured"]["machine"] = machine()
    report["costs"] = c = costs()
    report["machine"] = c["machine"]
    report["model"] = {}
    for learner, servers, period, per_node in _SHAPES:
        if learner not in c["learner_steps_per_s"]:
            continue
        key = (f"learner on {_LEARNERS[learner].format(gpu=c['gpu_device'])}, {servers} replay server(s), "
               f"{args.cores_per_node} cores per node, {args.nic_gbit:g} Gbit/s, a version every {period} "
               f"learner step(s), weights once per {'node' if per_node else 'actor'}")
        report["model"][key] = table(c, args.cores_per_node, servers, learner, args.nic_gbit, period, per_node)
    report["bottlenecks"] = {key: first_break(rows) for key, rows in report["model"].items()}
    os.makedirs(args.out, exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    plot(report, os.path.join(args.out, "scaling.png"))
    with open(os.path.join(args.out, "scaling.md"), "w") as f:
        f.write(render(report))
    for key, rows in report["model"].items():
        print(f"{key}: first to break: {first_break(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
