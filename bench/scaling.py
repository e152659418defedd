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
    gpu = None
    for name in ("learner_roofline_gpu_graph_cartpole.json", "learner_roofline_gpu_cartpole.json"):
        if os.path.exists(os.path.join(HERE, "results", name)):
            gpu = _load(name)
            break
    obs, act = roof["settings"]["obs_size"], roof["settings"]["action_size"]
    policy_floats = obs * 256 + 256 + 2 * (256 * 256 + 256) + 256 * act + act  # the default policy's weights
    return {
        "actor_env_steps_per_cpu_s": tp["actor"]["results"]["1"]["actor_steps_per_cpu_s"],
        "replay_inserts_per_s_per_server_core": cap["capacity"]["inserts_per_s_per_server_core"],
        "learner_steps_per_s_cpu": roof["learner_steps_per_s"],
        "learner_steps_per_s_gpu_proxy": gpu["learner_steps_per_s"] if gpu else None,
        "gpu_device": gpu["device"] if gpu else None,
        "batch": cfg.global_batch_size, "samples_per_insert": cfg.samples_per_insert,
        "steps_per_call": roof["settings"]["steps_per_call"],
        "item_bytes": 4 * (2 * obs + act + 2),  # a packed n-step transition, float32
        "policy_bytes": 4 * policy_floats,
        "sources": {"actor": "d4pg_throughput.json actor.results.1", "replay": "replay_capacity.json capacity",
                    "learner": "learner_roofline.json (+ the GPU proxy's JSON)"},
        "machine": tp.get("machine") or roof["machine"],
    }


def model(c: Dict[str, Any], nodes: int, cores: int, servers: int, learner: str, nic_gbit: float,
          relay: bool = False) -> Dict[str, Any]:
    """Each stage's ceiling in env steps/s for one cluster shape, and the bottleneck."""
    nic = nic_gbit * 1e9 / 8  # bytes/s
    learner_rate = c["learner_steps_per_s_cpu"] if learner == "cpu" else c["learner_steps_per_s_gpu_proxy"]
    versions_per_s = learner_rate / c["steps_per_call"]
    actors = nodes * cores
    # Per env step the learner node's NIC moves: the insert in, its sampled
    # copies out (replay lives with the learner), and the weights to remote
    # actors (versions/s x bytes, independent of env steps: a fixed load).
    bytes_per_step = c["item_bytes"] * (1 + c["samples_per_insert"])
    # With a per-node relay (not built) each node would fetch a version once.
    weight_load = (nodes if relay else actors) * versions_per_s * c["policy_bytes"]
    ceilings = {
        "acting": actors * c["actor_env_steps_per_cpu_s"],
        "replay": servers * c["replay_inserts_per_s_per_server_core"],
        "learner": learner_rate * c["batch"] / c["samples_per_insert"],
        "network": max(0.0, nic - weight_load) / bytes_per_step,
    }
    bottleneck = min(ceilings, key=ceilings.get)
    return {"nodes": nodes, "cores_per_node": cores, "actors": actors, "servers": servers, "learner": learner,
            "ceilings": ceilings, "env_steps_per_s": ceilings[bottleneck], "bottleneck": bottleneck,
            "weight_bytes_per_s": weight_load, "nic_bytes_per_s": nic}


def table(c, cores, servers, learner, nic_gbit, relay=False) -> List[Dict[str, Any]]:
    return [model(c, n, cores, servers, learner, nic_gbit, relay) for n in NODE_COUNTS]


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
    lines += ["## Costs the model uses", "",
              f"- one actor process: {c['actor_env_steps_per_cpu_s']:,.0f} env steps per CPU-second",
              f"- one Reverb server core: {c['replay_inserts_per_s_per_server_core']:,.0f} inserts/s "
              f"with their {c['samples_per_insert']:g} sampled items each",
              f"- learner: {c['learner_steps_per_s_cpu']:,.1f} steps/s on this CPU; "
              + (f"{c['learner_steps_per_s_gpu_proxy']:,.0f} steps/s on {c['gpu_device']} "
                 "(same-shape PyTorch proxy, not rlplat's learner)" if c["learner_steps_per_s_gpu_proxy"]
                 else "no GPU figure"),
              f"- {c['item_bytes']} bytes per transition, {c['policy_bytes'] / 1e3:,.0f} kB of policy weights "
              f"per version, a version every {c['steps_per_call']} learner steps", ""]
    for key, rows in report["model"].items():
        lines += [f"## Model: {key}", "", "| actor nodes | actors | acting | replay | learner | network | "
                  "env steps/s | bottleneck |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            ce = r["ceilings"]
            lines.append(f"| {r['nodes']} | {r['actors']} | {ce['acting']:,.0f} | {ce['replay']:,.0f} | "
                         f"{ce['learner']:,.0f} | {ce['network']:,.0f} | {r['env_steps_per_s']:,.0f} | "
                         f"{r['bottleneck']} |")
        lines += ["", f"The bottleneck as actor nodes are added: **{first_break(rows)}**.", ""]
    lines += ["Assumptions: one core per actor process and per Reverb server; replay on the learner's node, "
              "so its NIC carries inserts, samples and weights; each remote actor pulls every new weight "
              "version once (at a pull every 10 steps an actor asks more often than versions change). A "
              "network ceiling of 0 means the weights alone fill the learner's NIC. Network and protocol "
              "overheads are not counted, so the network ceiling is optimistic.", "",
              "Reading: on a CPU learner the learner binds from the first node; more actors only add load. "
              "With a GPU learner (8x the steps) the weights that every remote actor fetches, "
              "versions/s x actors x policy bytes, fill a 10 Gbit/s NIC at the first node: the next step is "
              "to relay weights once per node (one fetch per node into that node's shared-memory block, as "
              "actors on the learner's host already read them), which divides that load by the cores per node.",
              ""]
    return "\n".join(lines)


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
    for learner in ("cpu", "gpu"):
        if learner == "gpu" and not c["learner_steps_per_s_gpu_proxy"]:
            continue
        for servers in (1, 4):
            key = (f"learner on {'this CPU' if learner == 'cpu' else c['gpu_device'] + ' (proxy)'}, "
                   f"{servers} replay server(s), {args.cores_per_node} cores per node, {args.nic_gbit:g} Gbit/s")
            report["model"][key] = table(c, args.cores_per_node, servers, learner, args.nic_gbit)
        if learner == "gpu":
            key = (f"learner on {c['gpu_device']} (proxy), 4 replay server(s), {args.cores_per_node} cores per "
                   f"node, {args.nic_gbit:g} Gbit/s, weights relayed once per node (not built)")
            report["model"][key] = table(c, args.cores_per_node, 4, learner, args.nic_gbit, relay=True)
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
