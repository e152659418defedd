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
     32 sampled items, sampled batch / S per call: a call has a fixed cost, so
     more servers cost more per item; ``replay_costs_us``, fitted on
     ``replay_capacity`` runs at 16 and 256 items per call);
   - learner: learner steps/s x batch / samples-per-insert;
   - network: the learner node's NIC, which receives every insert, sends every
     sampled item and each weight version once per actor node (or per actor);
     the limiter ties versions to env steps, so both are bytes per env step.
   The system runs at the lowest ceiling; the table names it for N = 1..64 and
   the text names the first stage to break as N grows.
3. **Calibration** (from ``scaling_calibration.py``'s JSON, when present): the
   link part of the model beside D4PG runs on a three-node cluster with capped
   links.

Writes scaling.json, scaling.png and scaling.md under --out.

    python bench/scaling.py [--measure] [--cores-per-node 16] [--nic-gbit 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import throughput_report  # noqa: E402

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
        "replay_costs_us": dict(replay_costs_us(cfg.global_batch_size), batch=cfg.global_batch_size),
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


# One server, 2 writers and a sampler, on one machine: sampled batches of 16 and of 256 items.
REPLAY_BATCH_FILES = {16: "replay_capacity_b16.json", 256: "replay_capacity_b256.json"}


def replay_costs_us(batch: Optional[int] = None) -> Dict[str, float]:
    """A Reverb server's CPU microseconds per inserted item and per sampled item, when it is sampled
    ``batch`` items per call.

    A sample call has a fixed cost spread over its items, so the per-item cost
    is ``a + c / batch``, fitted on ``replay_capacity.py`` runs at two batch
    sizes (``REPLAY_BATCH_FILES``); the insert cost is their mean. With one
    server of D4PG's batch of 256 a call takes 256 items, with S servers
    256 / S each, and a small-batch run pays several times more per item (the
    calibration's sharded runs, ``scaling_calibration.py``). Without both
    files, ``replay_capacity.json``'s figures at its own batch.
    """
    if batch is not None and all(os.path.exists(os.path.join(HERE, "results", f)) for f in REPLAY_BATCH_FILES.values()):
        (b1, f1), (b2, f2) = sorted(REPLAY_BATCH_FILES.items())
        c1, c2 = _load(f1)["capacity"], _load(f2)["capacity"]
        s1, s2 = c1["server_cpu_us_per_sampled_item"], c2["server_cpu_us_per_sampled_item"]
        per_call = (s1 - s2) / (1 / b1 - 1 / b2)
        return {"insert": 0.5 * (c1["server_cpu_us_per_insert"] + c2["server_cpu_us_per_insert"]),
                "sampled_item": s2 - per_call / b2 + per_call / batch, "per_sample_call": per_call}
    cap = _load("replay_capacity.json")["capacity"]
    return {"insert": cap["server_cpu_us_per_insert"], "sampled_item": cap["server_cpu_us_per_sampled_item"]}


def replay_inserts_per_core(samples_per_insert: float, batch: Optional[int] = None) -> float:
    """Inserts/s one Reverb server core takes when each insert is also sampled ``samples_per_insert``
    times, ``batch`` items per sample call (``replay_costs_us``)."""
    cost = replay_costs_us(batch)
    return 1e6 / (cost["insert"] + samples_per_insert * cost["sampled_item"])


def _replay_per_core(c: Dict[str, Any], servers: int) -> float:
    """One server core's inserts/s in the model: each server sampled batch / servers items per call
    (``replay_costs_us``), when the costs carry the per-call fit; else the one measured figure."""
    fit = c.get("replay_costs_us")
    if not fit or "per_sample_call" not in fit:
        return c["replay_inserts_per_s_per_server_core"]
    items = max(1, c["batch"] // servers)
    item = fit["sampled_item"] + fit["per_sample_call"] * (1 / items - 1 / fit["batch"])
    return 1e6 / (fit["insert"] + c["samples_per_insert"] * item)


def model(c: Dict[str, Any], nodes: int, cores: int, servers: int, learner: str, nic_gbit: float,
          publish_period: int = 1, per_node: bool = True) -> Dict[str, Any]:
    """Each stage's ceiling in env steps/s for one cluster shape, the bottleneck, and the weights' lag.

    The learner node's NIC carries each insert in and its sampled copies out
    (replay lives with the learner), and the weights: a version every
    ``publish_period`` learner steps, leaving once per actor node
    (``per_node``, as built) or once per actor. The samples-per-insert limiter
    ties learner steps, and so versions, to env steps, so the weights too are
    bytes per env step, and the network's ceiling counts both. Where it binds,
    the run slows until both fit (measured on a capped three-node cluster:
    ``scaling_calibration.py``); the actors act on versions at most
    ``publish_period`` learner steps old, whatever the NIC.
    """
    nic = nic_gbit * 1e9 / 8  # bytes/s
    actors = nodes * cores
    copies = nodes if per_node else actors
    data_per_step = c["item_bytes"] * (1 + c["samples_per_insert"])
    weights_per_step = c["samples_per_insert"] / (c["batch"] * publish_period) * copies * c["policy_bytes"]
    ceilings = {
        "acting": actors * c["actor_env_steps_per_cpu_s"],
        "replay": servers * _replay_per_core(c, servers),
        "learner": c["learner_steps_per_s"][learner] * c["batch"] / c["samples_per_insert"],
        "network": nic / (data_per_step + weights_per_step),
    }
    bottleneck = min(ceilings, key=ceilings.get)
    env_rate = ceilings[bottleneck]
    learner_rate = env_rate * c["samples_per_insert"] / c["batch"]  # learner steps/s at the system's rate
    published = learner_rate / publish_period
    return {"nodes": nodes, "cores_per_node": cores, "actors": actors, "servers": servers, "learner": learner,
            "publish_period": publish_period, "per_node": per_node,
            "ceilings": ceilings, "env_steps_per_s": env_rate, "bottleneck": bottleneck,
            "learner_steps_per_s": learner_rate, "versions_per_s_published": published,
            "versions_per_s_per_node": published, "lag_learner_steps": float(publish_period),
            "weights_bind": bottleneck == "network" and weights_per_step > data_per_step,
            "weight_bytes_per_s": env_rate * weights_per_step, "nic_bytes_per_s": nic}


def link_model(base: Dict[str, Any], cap_mbit: float, per_node: bool, share: float) -> Dict[str, Any]:
    """What capping each actor node's link at ``cap_mbit`` (both ways) does to a run measured uncapped.

    ``base`` is a ``scaling_calibration`` record of the same run with no link
    binding: its env and learner steps/s are the compute-bound rates. Each
    version (``version_bytes``) crosses a node's link once (``per_node``) or
    once per actor there, and the learner publishes one every
    ``publish_period`` learner steps, which the samples-per-insert limiter ties
    to env steps (about ``spi / (batch * period)`` versions per env step;
    counted on the base run), so each link carries a fixed number of bytes of
    weights per env step, and the link alone would carry
    ``share * rate / bytes_per_env_step`` env steps/s (``share``: the part of
    the link weights can fill while the actors' inserts, queued behind them,
    still get through; fitted on one capped run). The two limits meet in a
    smooth knee, not a corner: near the link's ceiling the inserts already
    wait behind each transfer, so

        1 / env**2 = 1 / env_base**2 + 1 / env_link**2.

    The learner, held to the inserts by the limiter, slows with the actors:
    the lag stays what it was, and every published version still reaches every
    node, so the bytes per node are the base run's. A slow link makes the run
    slower, not staler.
    """
    rate = cap_mbit * 1e6 / 8
    copies = 1 if per_node else max(base["actors_per_node"].values())
    # As measured on the base run: versions published per env step (the limiter's ratio, less the
    # warm-up before the first learner step), times the copies each node takes.
    bytes_per_env_step = copies * base["version_bytes"] * base["versions_published"] / base["max_actor_steps"]
    ceiling = share * rate / bytes_per_env_step
    env = (base["env_steps_per_s"] ** -2 + ceiling ** -2) ** -0.5
    return {"env_steps_per_s": env, "link_ceiling_env_steps_per_s": ceiling,
            "learner_steps_per_s": base["learner_steps_per_s"] * env / base["env_steps_per_s"],
            "weight_bytes_per_env_step": bytes_per_env_step, "link_binds_weights": ceiling < base["env_steps_per_s"],
            "lag_learner_steps": base["policy_lag_median"],
            "rx_bytes_per_node": statistics.mean(base["rx_bytes"].values())}


def relay_link_model(base: Dict[str, Any], cap_mbit: float, link_factor: float) -> Dict[str, Any]:
    """``link_model`` for ``--weight-relay``: a narrow link makes the actors staler, not slower.

    A node's relay asks for the newest version only once the one it is
    fetching has arrived, so one version at a time crosses the link, and the
    inserts keep their share of it: the env and learner steps/s stay the base
    run's. A version takes ``T = version_bytes / (link_factor * rate)`` to
    cross (``link_factor``: the link's effective rate over the cap for one
    stream, fitted on one capped run), so it is ``T * learner_steps_per_s``
    learner steps older when the actors get it than on the base run, and the
    relay fetches at most ``1 / T`` versions per second of the
    ``learner_steps_per_s / publish_period`` published: the bytes per node
    fall in that proportion.
    """
    rate = cap_mbit * 1e6 / 8
    learner = base["learner_steps_per_s"]

    def crossing_s(mbit):
        return base["version_bytes"] / (link_factor * mbit * 1e6 / 8)

    extra_lag = (crossing_s(cap_mbit) - crossing_s(base["cap_mbit"])) * learner
    fetched = min(1.0, (1.0 / crossing_s(cap_mbit)) / (learner / base["publish_period"]))
    return {"env_steps_per_s": base["env_steps_per_s"], "learner_steps_per_s": learner,
            "link_ceiling_env_steps_per_s": None, "link_binds_weights": fetched < 1.0,
            "weight_bytes_per_env_step": fetched * base["version_bytes"] * base["versions_published"]
            / base["max_actor_steps"], "crossing_s": base["version_bytes"] / (link_factor * rate),
            "lag_learner_steps": base["policy_lag_median"] + max(0.0, extra_lag),
            "rx_bytes_per_node": fetched * statistics.mean(base["rx_bytes"].values())}


def fit_relay_factor(base: Dict[str, Any], run: Dict[str, Any]) -> float:
    """The ``link_factor`` of ``relay_link_model`` that gives ``run``'s measured lag."""
    extra = run["policy_lag_median"] - base["policy_lag_median"]
    if extra <= 0:
        raise ValueError(f"the relay run at {run['cap_mbit']} Mbit/s is no staler than its base: "
                         "the link does not bind")
    bits = base["version_bytes"] * 8
    # extra = bits * learner * (1 / cap - 1 / cap_base) / (factor * 1e6)
    return bits * base["learner_steps_per_s"] * (1 / run["cap_mbit"] - 1 / base["cap_mbit"]) / (extra * 1e6)


def fit_share(base: Dict[str, Any], run: Dict[str, Any], per_node: bool) -> float:
    """The ``share`` of ``link_model`` that gives ``run``'s measured env steps/s (a run the link binds)."""
    per_step = link_model(base, run["cap_mbit"], per_node, 1.0)["weight_bytes_per_env_step"]
    if run["env_steps_per_s"] >= base["env_steps_per_s"]:
        raise ValueError(f"the run at {run['cap_mbit']} Mbit/s is not slower than its base: the link does not bind")
    ceiling = (run["env_steps_per_s"] ** -2 - base["env_steps_per_s"] ** -2) ** -0.5
    return ceiling * per_step / (run["cap_mbit"] * 1e6 / 8)


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
    if report.get("rule_of_thumb"):
        lines += [report["rule_of_thumb"], ""]
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
                  "env steps/s | bottleneck | versions/s to each node | lag, at most (learner steps) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            ce = r["ceilings"]
            lag = f"{r['lag_learner_steps']:,.0f}"
            lines.append(f"| {r['nodes']} | {r['actors']} | {ce['acting']:,.0f} | {ce['replay']:,.0f} | "
                         f"{ce['learner']:,.0f} | {ce['network']:,.0f} | {r['env_steps_per_s']:,.0f} | "
                         f"{r['bottleneck']} | {r['versions_per_s_per_node']:,.1f} | {lag} |")
        lines += ["", f"The bottleneck as actor nodes are added: **{first_break(rows)}**.", ""]
    lines += _calibration_lines()
    lines += ["Assumptions: one core per actor process and per Reverb server; replay on the learner's node, "
              "so its NIC carries the inserts and the sampled items, and the weights: each published version "
              "leaves it once per actor node (rlplat's per-node path) or once per actor (`--weights-per-actor`). "
              "The samples-per-insert limiter ties versions to env steps, so where the NIC binds the whole run "
              "slows until data and weights fit, and the actors stay at most one publish period behind "
              "(the calibration above shows this on real links). Network and protocol overheads are not "
              "counted.", "",
              "Reading: on a CPU learner the learner binds from the first node. A GPU learner publishing "
              "every step sends versions/s x nodes x policy bytes; once per actor that fills a 10 Gbit/s "
              "NIC at the first node and the network sets the pace; once per node it does so as nodes are "
              "added; `--weight-publish-period` divides the weights' bytes, and the run is learner-bound "
              "again.", ""]
    return "\n".join(lines)


README = os.path.join(os.path.dirname(HERE), "README.md")
RULE_MARKERS = ("<!-- scaling rule: generated by bench/scaling.py -->", "<!-- end of scaling rule -->")


def rule_of_thumb(report: Dict[str, Any], cores: int, nic_gbit: float) -> str:
    """How many actor nodes feed one learner, and which flag to change when the NIC binds, from the model."""
    c = report["costs"]
    per_node = cores * c["actor_env_steps_per_cpu_s"]
    feeds = {name: steps * c["batch"] / c["samples_per_insert"] for name, steps in c["learner_steps_per_s"].items()}
    fastest = max(feeds, key=feeds.get)
    nodes = max(1, math.ceil(feeds[fastest] / per_node))
    bound = [r for key, rows in report["model"].items() for r in rows
             if r["learner"] == fastest and r["per_node"] and r["publish_period"] == 1 and r["weights_bind"]]
    relieved = [r for key, rows in report["model"].items() for r in rows
                if r["learner"] == fastest and r["per_node"] and r["publish_period"] > 1]
    text = (f"**Rule of thumb** (from the model in `bench/results/scaling.md`; D4PG's defaults: batch "
            f"{c['batch']}, samples per insert {c['samples_per_insert']:g}). A learner taking L steps/s consumes "
            f"L x {c['batch']} / {c['samples_per_insert']:g} env steps/s. One {cores}-core actor node makes about "
            f"{per_node:,.0f} on cartpole:swingup ({c['actor_env_steps_per_cpu_s']:,.0f} per core), and the "
            f"fastest learner measured ({_LEARNERS.get(fastest, fastest).format(gpu=c['gpu_device'])}) consumes "
            f"{feeds[fastest]:,.0f}: **{nodes} actor node(s) feed one learner**. More do not make it faster "
            "(unless the environment costs more per step or `--samples-per-insert` is lowered), and each adds "
            "a copy of every weight version to the learner's NIC.")
    if bound:
        first = min(r["nodes"] for r in bound)
        text += (f" Publishing every learner step, the weights fill a {nic_gbit:g} Gbit/s NIC from {first} actor "
                 "node(s) and the run slows to what the NIC carries (bottleneck: network); then raise "
                 "**`--weight-publish-period`**")
        if relieved:
            r = max(relieved, key=lambda r: r["nodes"])
            text += (f": at {r['publish_period']} learner steps, {r['nodes']} nodes run at "
                     f"{r['env_steps_per_s']:,.0f} env steps/s ({r['bottleneck']}-bound), the actors at most "
                     f"{r['lag_learner_steps']:,.0f} learner steps behind")
        text += "."
    relay = _calibration_rows("relay")
    if relay:
        narrow = min(relay, key=lambda r: r["cap_mbit"])
        wide = max(relay, key=lambda r: r["cap_mbit"])
        text += (f" Where a node's own link binds, **`--weight-relay`** keeps the actors' pace and makes them "
                 f"staler instead: on the capped three-node cluster at {narrow['cap_mbit']} Mbit/s it ran "
                 f"{narrow['measured']['env_steps_per_s']:,.0f} env steps/s, {narrow['measured']['policy_lag']:,.0f} "
                 "learner steps behind, where one object per version ran "
                 f"{_measured(narrow['cap_mbit'], 'per_node'):,.0f}; uncapped it ran "
                 f"{wide['measured']['env_steps_per_s']:,.0f} against {_measured(wide['cap_mbit'], 'per_node'):,.0f}.")
    return text


def _calibration_rows(path: str) -> List[Dict[str, Any]]:
    file = os.path.join(HERE, "results", "scaling_calibration.json")
    if not os.path.exists(file):
        return []
    with open(file) as f:
        return [r for r in json.load(f)["rows"] if r["path"] == path]


def _measured(cap_mbit: int, path: str) -> float:
    return next((r["measured"]["env_steps_per_s"] for r in _calibration_rows(path) if r["cap_mbit"] == cap_mbit),
                float("nan"))


def write_rule_into_readme(text: str) -> None:
    """Replaces the README's block between RULE_MARKERS with ``text`` (one place, never typed by hand)."""
    with open(README, encoding="utf-8") as f:
        readme = f.read()
    start, end = RULE_MARKERS
    if start not in readme or end not in readme:
        return
    head, rest = readme.split(start, 1)
    tail = rest.split(end, 1)[1]
    with open(README, "w", encoding="utf-8") as f:
        f.write(f"{head}{start}\n{text}\n{end}{tail}")


_PATH_NAMES = {"per_node": "once per node", "per_actor": "once per actor",
               "per_node_2_shards": "once per node, 2 replay servers",
               "relay": "once per node, relay process"}


def _calibration_lines() -> List[str]:
    """The link model beside the capped three-node runs of ``scaling_calibration.py``, when there are any."""
    path = os.path.join(HERE, "results", "scaling_calibration.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        calibration = json.load(f)
    rows = calibration["rows"]
    if not rows:
        return []
    machine = rows[0]["machine"]
    fit = calibration["fitted_on"]
    lines = ["## Calibration: the link model against a real three-node cluster", "",
             "Generated by `python bench/scaling_calibration.py`: D4PG with two actors on each of two worker "
             "nodes (`scripts/multinode_cluster.sh`, one network namespace per node), each worker's link capped "
             "both ways with `tc`; a policy of about 1 MB per version, published every "
             f"{rows[0]['publish_period']} learner steps, samples per insert "
             f"{rows[0]['samples_per_insert']['setting']:g}. Each path's uncapped run is its base; `share` = "
             f"{calibration['share']:.2f} (the part of a link the weights can fill before the actors' inserts, "
             f"queued behind them, hold the actors back) is fitted on the per-node run at {fit['cap_mbit']} Mbit/s; "
             "every other row is predicted by `link_model`, but the relay's, by `relay_link_model`"
             + (f" (its link factor {calibration['relay_link_factor']:.2f} fitted on the relay run at "
                f"{calibration['relay_fitted_on']['cap_mbit']} Mbit/s)" if calibration.get("relay_link_factor") else "")
             + f". Measured on {machine.get('cpu_model')} ({machine.get('cpus')} cores).", "",
             "| weights | link cap (Mbit/s) | env steps/s: measured (model) | lag, learner steps: measured (model) "
             "| MiB received per node: measured (model) | samples per insert | row | within 25% |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m, p = r["measured"], r["predicted"]
        lag = "-" if m["policy_lag"] is None else f"{m['policy_lag']:,.0f}"
        spi = r["samples_per_insert"]["measured"]
        ok = "yes" if all(r["within_25pct"].values()) else \
            "no: " + ", ".join(k for k, v in r["within_25pct"].items() if not v)
        lines.append(f"| {_PATH_NAMES.get(r['path'], r['path'])} | {r['cap_mbit']:,} | "
                     f"{m['env_steps_per_s']:,.0f} ({p['env_steps_per_s']:,.0f}) | {lag} ({p['policy_lag']:,.0f}) | "
                     f"{m['mib_per_node']:,.1f} ({p['mib_per_node']:,.1f}) | "
                     f"{'-' if spi is None else f'{spi:.2f}'} | {r['role']} | {ok} |")
    lines += ["", "Reading: with one object per version (or per actor), a capped link does not make the actors "
              "staler. Once the weights fill a node's link, the actors' inserts wait behind them; the "
              "samples-per-insert limiter holds the learner to those inserts, so the whole run slows until the "
              "versions it publishes fit the link, and every version still reaches every node. "
              "`--weight-publish-period` is the lever: the weights' bytes per env step fall in proportion. "
              "With the relay process (`--weight-relay`) the link carries one version at a time and the relay "
              "skips those it could not fetch: the run keeps its pace and the actors act on older weights."]
    ceiling = calibration.get("replay_ceiling")
    if ceiling:
        lines += ["", f"**Replay ceiling** ({ceiling['servers']} servers, samples per insert "
                  f"{ceiling['samples_per_insert']:g}). The runs above never fill two servers, so the ceiling is "
                  "read from cost: the servers' CPU against inserts/s over the sharded runs (their link caps set "
                  "different rates) is a line whose slope is the CPU per insert, its samples included; one core "
                  "per server over that slope is the measured ceiling. The model's is "
                  f"`replay_inserts_per_core` at {ceiling.get('items_per_sample_call', '?')} items per sample call "
                  "(the batch over the servers), from `replay_capacity.py` runs of one server at 16 and 256 items "
                  "per call (`replay_costs_us`: a call's fixed cost spread over its items).", "",
                  "| link cap (Mbit/s) | inserts/s | sampled items/s | server cores busy |", "|---|---|---|---|"]
        lines += [f"| {r['cap_mbit']:,} | {r['inserts_per_s']:,.0f} | {r['sampled_items_per_s']:,.0f} | "
                  f"{r['server_cores']:.3f} |" for r in ceiling["runs"]]
        lines += ["", f"Slope: {ceiling['cpu_us_per_insert']:.1f} us of server CPU per insert; idle: "
                  f"{ceiling['idle_server_cores']:.3f} cores. Ceiling: measured "
                  f"{ceiling['measured_inserts_per_s']:,.0f} inserts/s, model {ceiling['model_inserts_per_s']:,.0f} "
                  f"(measured / model {ceiling['ratio_measured_over_model']:.2f}; within 25%: "
                  f"{'yes' if ceiling['within_25pct'] else 'no'})."]
    return lines + [""]


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
    log = throughput_report.logger(time.time())

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
    report["rule_of_thumb"] = rule_of_thumb(report, args.cores_per_node, args.nic_gbit)
    plot(report, os.path.join(args.out, "scaling.png"))
    with open(os.path.join(args.out, "scaling.md"), "w") as f:
        f.write(render(report))
    if os.path.abspath(args.out) == os.path.join(HERE, "results"):
        write_rule_into_readme(report["rule_of_thumb"])
    for key, rows in report["model"].items():
        print(f"{key}: first to break: {first_break(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
