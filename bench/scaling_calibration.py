"""Checks the scaling model's link part against a real three-node cluster whose links are capped with ``tc``.

``scripts/multinode_cluster.sh`` starts a head (the learner, with replay) and
two worker nodes of two actors each, every node in its own network namespace.
For each cap in ``--caps`` (Mbit/s, both ways on each worker node's link), D4PG
runs on cartpole:swingup with weights once per node (the default: an object
reference per version), once per node through a relay process
(``--weight-relay``) and with ``--weights-per-actor``; uncapped, at the
largest cap below and at the smallest, also with replay split over two
servers (``--num-replay-shards 2``), whose measured samples per insert is
checked against the setting and whose CPU per insert gives the measured
replay ceiling (``replay_ceiling``). The policy is widened to
about 1 MB per version, so that the weights, not the few bytes of each
transition, are what a link carries. Each run records, over its steady part
(after a quarter of the env steps): env steps/s, learner steps/s, the actors'
policy lag (the learner's step, when an actor asks, minus the version it
holds), and the bytes each worker node received and sent (its ``eth0``).

The model (``scaling.link_model``) takes the uncapped run of each path as its
compute-bound point and predicts, for every other cap, the env steps/s, the
lag and the bytes per node. Its one free number, ``share`` (the part of a
link the weights can fill before the actors' inserts, queued behind them,
hold the actors back), is fitted on one run: per node, at the smallest cap. ``scaling.py`` puts
the table beside its cluster model in ``scaling.md``.

Each (path, cap) run is kept in ``results/runs/scaling_calibration-*.json``,
so an interrupted calibration resumes. Needs root (namespaces, ``tc``).

    python bench/scaling_calibration.py [--caps 1000,40,20,10] [--max-actor-steps 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

import throughput_report  # noqa: E402
SCRIPT = os.path.join(REPO, "scripts", "multinode_cluster.sh")
HEAD, WORKERS = "10.231.7.1", {"w1": "10.231.7.2", "w2": "10.231.7.3"}
PATHS = {"per_node": [], "per_actor": ["--weights-per-actor"],
         # The other way to one copy per node: a relay process per node, into its shared memory.
         "relay": ["--weight-relay"],
         # Replay split over two servers, uncapped, at the largest cap below and at the smallest: the
         # second server's CPU changes the compute-bound base, so this path has its own; three insert
         # rates give the servers' CPU per insert (the replay ceiling) as a slope.
         "per_node_2_shards": ["--num-replay-shards", "2"]}
SHARDED = "per_node_2_shards"
PER_NODE_PATHS = ("per_node", "relay", SHARDED)
NUM_ACTORS = 4
BATCH_SIZE, SAMPLES_PER_INSERT = 32, 4


def _script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _check(done: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if done.returncode != 0:
        sys.exit(f"scaling_calibration: {what} failed (exit {done.returncode}): "
                 f"{(done.stderr or done.stdout).strip()[-1500:]}")
    return done


def _link_bytes(state: str) -> Dict[str, Dict[str, int]]:
    """Per worker node: the bytes its eth0 has received (``rx``) and sent (``tx``)."""
    out = {}
    for node, ip in WORKERS.items():
        # /proc/net/dev is the reading process's network namespace: run it on the node.
        read = _check(_script("exec", state, node, "--", "cat", "/proc/net/dev", timeout=60), "reading eth0")
        fields = next(x for x in read.stdout.splitlines() if x.strip().startswith("eth0:")).split(":", 1)[1].split()
        out[ip] = {"rx": int(fields[0]), "tx": int(fields[8])}
    return out


def _records(logdir: str, role: str) -> List[Dict[str, Any]]:
    with open(os.path.join(logdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r.get("role") == role]


def _measure(state: str, logdir: str, args, extra: List[str]) -> Dict[str, Any]:
    before = _link_bytes(state)
    command = ["rlplat", "train", "d4pg", "--address", f"{HEAD}:6391", "--env", "cartpole:swingup",
               "--num-actors", str(NUM_ACTORS), "--actor-cpus", "0.5", "--max-actor-steps",
               str(args.max_actor_steps), "--logdir", logdir, "--seed", "1",
               "--policy-layer-sizes", "512,512", "--critic-layer-sizes", "32,32", "--global-batch-size",
               str(BATCH_SIZE), "--min-replay-size", "200", "--samples-per-insert", str(SAMPLES_PER_INSERT),
               "--max-replay-size", "20000",
               "--eval-every-steps", str(args.max_actor_steps), "--eval-episodes", "1",
               "--weight-publish-period", str(args.publish_period), *extra]
    started = time.monotonic()
    _check(_script("exec", state, "head", "--", *command, timeout=900), "the run")
    seconds = time.monotonic() - started
    after = _link_bytes(state)
    # Actor records (one per chunk each actor returns): env steps, time, and the lag of the version it
    # held, counted by the driver; learner records (every few seconds): learner steps and versions.
    actors = [r for r in _records(logdir, "actor") if "policy_lag" in r]
    learner = [r for r in _records(logdir, "learner") if "actor_steps" in r]
    steady = [r for r in actors if r["step"] >= args.max_actor_steps // 4]
    steady_learner = [r for r in learner if r["actor_steps"] >= args.max_actor_steps // 4]
    if len(steady) < 8 or len(steady_learner) < 2:
        sys.exit(f"scaling_calibration: too few records in {logdir} for a steady rate; raise --max-actor-steps")
    first, last = steady[0], steady[-1]
    span = last["wall_time"] - first["wall_time"]
    learner_span = steady_learner[-1]["wall_time"] - steady_learner[0]["wall_time"]
    published = [r for r in learner if "weight_versions_published" in r]
    lags = [r["remote_policy_lag"] for r in steady_learner if "remote_policy_lag" in r]
    with_cpu = [r for r in steady_learner if "replay_server_cpu_s" in r and "replay_inserts" in r]
    replay = None
    if len(with_cpu) >= 2:  # the replay servers' CPU over the steady part (servers of their own only)
        a, b = with_cpu[0], with_cpu[-1]
        dt = b["wall_time"] - a["wall_time"]
        replay = {"server_cores": (b["replay_server_cpu_s"] - a["replay_server_cpu_s"]) / dt,
                  "inserts_per_s": (b["replay_inserts"] - a["replay_inserts"]) / dt,
                  "sampled_items_per_s": (b["replay_samples"] - a["replay_samples"]) / dt,
                  "servers": sum(1 for k in b if k.startswith("replay_shard") and k.endswith("_cpu_s")) or 1}
    with open(os.path.join(logdir, "run_info.json"), encoding="utf-8") as f:
        placement = json.load(f)["node_placement"]
    actors_per_node = {ip: sum(placement[f"actor {i}"]["node_ip"] == ip for i in range(NUM_ACTORS))
                       for ip in WORKERS.values()}
    return {"env_steps_per_s": (last["step"] - first["step"]) / span,
            "learner_steps_per_s": (steady_learner[-1]["step"] - steady_learner[0]["step"]) / learner_span,
            # What the learner saw when actors asked (its step minus the version they held): exact.
            "policy_lag_median": statistics.median(lags) if lags else None,
            # The driver's count, as the console shows it: behind by up to a train call (64 steps).
            "driver_policy_lag_median": statistics.median(r["policy_lag"] for r in steady),
            "versions_published": published[-1]["weight_versions_published"],
            "version_bytes": published[-1]["weight_version_bytes"],
            "rx_bytes": {ip: after[ip]["rx"] - before[ip]["rx"] for ip in WORKERS.values()},
            "tx_bytes": {ip: after[ip]["tx"] - before[ip]["tx"] for ip in WORKERS.values()},
            "actors_per_node": actors_per_node, "batch_size": BATCH_SIZE, "samples_per_insert": SAMPLES_PER_INSERT,
            "measured_samples_per_insert": last_learner_with(learner, "samples_per_insert"),
            "replay": replay,
            "publishing_seconds": published[-1]["wall_time"] - learner[0]["wall_time"],
            "steady_seconds": span, "wall_seconds": seconds}


def last_learner_with(records: List[Dict[str, Any]], key: str) -> Any:
    """``key`` of the last learner record that has it (None if none does)."""
    return next((r[key] for r in reversed(records) if key in r), None)


def run_calibration(args, log) -> None:
    from seeds import machine

    todo = [(cap, path) for cap in args.caps for path in PATHS
            if path != SHARDED or cap in (*args.caps[:2], args.caps[-1])
            if args.no_reuse or not os.path.exists(_record_path(args.out, path, cap))]
    if not todo:
        log("every (path, cap) has a record; --no-reuse runs them again")
        return
    state = os.path.join(tempfile.mkdtemp(prefix="scaling_calibration_"), "cluster")
    up = _script("up", state, "--head-resources", '{"learner": 1}', "--worker-cpus", "2",
                 "--worker-resources", '{"actor": 2}', timeout=300)
    _check(up, "starting the three-node cluster")
    try:
        for cap, path in todo:
            for node in WORKERS:
                _check(_script("shape", state, node, str(cap), timeout=60), f"capping {node}")
            logdir = os.path.join(os.path.dirname(state), f"{path}-{cap}")
            log(f"{path}, links capped at {cap} Mbit/s ...")
            record = _measure(state, logdir, args, PATHS[path])
            record.update(path=path, cap_mbit=cap, publish_period=args.publish_period,
                          max_actor_steps=args.max_actor_steps, machine=machine())
            os.makedirs(os.path.dirname(_record_path(args.out, path, cap)), exist_ok=True)
            with open(_record_path(args.out, path, cap), "w") as f:
                json.dump(record, f, indent=1)
            log(f"  env {record['env_steps_per_s']:.0f}/s, learner {record['learner_steps_per_s']:.1f}/s, "
                f"lag {record['policy_lag_median']}, received per node (MiB) "
                + ", ".join(f"{b / 2**20:.1f}" for b in record["rx_bytes"].values()))
    finally:
        _script("down", state, timeout=120)


def _record_path(out: str, path: str, cap: int) -> str:
    return os.path.join(out, "runs", f"scaling_calibration-{path}-{cap}mbit.json")


def report(out: str) -> Dict[str, Any]:
    """Every recorded run beside the model's prediction for it.

    Each path's uncapped run is its base. ``share`` (the one fitted number) is
    fitted on the per-node run at the smallest cap; every other capped run is
    a prediction.
    """
    import scaling

    records: Dict[str, List[Dict[str, Any]]] = {}
    for path in PATHS:
        for name in sorted(os.listdir(os.path.join(out, "runs"))):
            if name.startswith(f"scaling_calibration-{path}-"):
                with open(os.path.join(out, "runs", name)) as f:
                    records.setdefault(path, []).append(json.load(f))
        records.get(path, []).sort(key=lambda r: -r["cap_mbit"])
    rows: List[Dict[str, Any]] = []
    # The narrowest link: there the link, not the cores, sets the pace the most plainly.
    fitted_on = records["per_node"][-1] if len(records.get("per_node", [])) > 1 else None
    if fitted_on is None:
        return {"benchmark": "scaling_calibration", "rows": rows, "share": None}
    share = scaling.fit_share(records["per_node"][0], fitted_on, per_node=True)
    relay_fit = records["relay"][-1] if len(records.get("relay", [])) > 1 else None
    relay_factor = scaling.fit_relay_factor(records["relay"][0], relay_fit) if relay_fit else None
    for path, runs in records.items():
        base = runs[0]
        for r in runs:
            if path == "relay":
                predicted = scaling.relay_link_model(base, r["cap_mbit"], relay_factor)
            else:
                predicted = scaling.link_model(base, r["cap_mbit"], per_node=path in PER_NODE_PATHS, share=share)
            measured = {"env_steps_per_s": r["env_steps_per_s"], "policy_lag": r["policy_lag_median"],
                        "mib_per_node": statistics.mean(r["rx_bytes"].values()) / 2**20}
            model = {"env_steps_per_s": predicted["env_steps_per_s"], "policy_lag": predicted["lag_learner_steps"],
                     "mib_per_node": predicted["rx_bytes_per_node"] / 2**20}
            rows.append({"path": path, "cap_mbit": r["cap_mbit"],
                         "role": "base" if r is base else ("fit" if r in (fitted_on, relay_fit) else "predicted"),
                         "measured": measured, "predicted": model, "link_binds": predicted["link_binds_weights"],
                         "within_25pct": {k: measured[k] is not None and abs(measured[k] - v) <= 0.25 * abs(measured[k])
                                          for k, v in model.items()},
                         "samples_per_insert": {"setting": r["samples_per_insert"],
                                                "measured": r.get("measured_samples_per_insert")},
                         "publish_period": r["publish_period"], "machine": r["machine"]})
    result = {"benchmark": "scaling_calibration", "rows": rows, "share": share, "machine": rows[0]["machine"],
              "fitted_on": {"path": "per_node", "cap_mbit": fitted_on["cap_mbit"]},
              "relay_link_factor": relay_factor,
              "relay_fitted_on": relay_fit and {"path": "relay", "cap_mbit": relay_fit["cap_mbit"]},
              "replay_ceiling": replay_ceiling(records.get(SHARDED, []))}
    with open(os.path.join(out, "scaling_calibration.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def replay_ceiling(runs: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The replay servers' ceiling measured on the sharded runs beside the model's for the same settings.

    The runs' inserts never come near what two servers take, so the ceiling
    is read from cost, not from saturation: the servers' CPU (cores busy)
    against inserts/s over the runs' different rates (the link caps set
    them) is a line whose slope is the CPU per insert, its samples included,
    and whose intercept is what the servers use idle (Ray's threads, Reverb's
    polling). One core per server over that slope is the measured ceiling.
    The model's is ``scaling.replay_inserts_per_core`` at the runs'
    samples-per-insert and items per sample call (the batch over the
    servers), from ``replay_capacity.py`` runs at two batch sizes.
    """
    import numpy as np
    import scaling

    points = [r for r in runs if r.get("replay")]
    if len(points) < 2:
        return None
    x = np.array([r["replay"]["inserts_per_s"] for r in points])
    y = np.array([r["replay"]["server_cores"] for r in points])
    slope, intercept = np.polyfit(x, y, 1)
    servers = points[0]["replay"]["servers"]
    spi = points[0]["samples_per_insert"]
    per_call = points[0]["batch_size"] // servers  # every batch takes an equal share from each server
    model_per_core = scaling.replay_inserts_per_core(spi, per_call)
    measured_per_core = 1.0 / slope if slope > 0 else float("inf")
    return {"runs": [{"cap_mbit": r["cap_mbit"], **r["replay"]} for r in points],
            "servers": servers, "samples_per_insert": spi, "items_per_sample_call": per_call,
            "cpu_us_per_insert": float(slope) * 1e6, "idle_server_cores": float(intercept),
            "measured_inserts_per_s": servers * float(measured_per_core),
            "model_inserts_per_s": servers * model_per_core,
            "ratio_measured_over_model": float(measured_per_core / model_per_core),
            "within_25pct": bool(abs(measured_per_core - model_per_core) <= 0.25 * measured_per_core)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--caps", default="1000,40,20,10",
                        help="link caps in Mbit/s; the largest is each path's uncapped base")
    parser.add_argument("--max-actor-steps", type=int, default=20_000)
    parser.add_argument("--publish-period", type=int, default=20, help="learner steps between versions")
    parser.add_argument("--no-reuse", action="store_true", help="rerun (path, cap) pairs that have a record")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    try:
        args.caps = sorted({int(c) for c in args.caps.split(",")}, reverse=True)
    except ValueError:
        parser.error(f"--caps takes whole Mbit/s separated by commas (got {args.caps!r})")
    log = throughput_report.logger(time.time())

    if not args.report_only:
        run_calibration(args, log)
    result = report(args.out)
    for row in result["rows"]:
        m, p = row["measured"], row["predicted"]
        lag = "-" if m["policy_lag"] is None else f"{m['policy_lag']:.0f}"
        log(f"{row['path']} {row['cap_mbit']} Mbit/s: env {m['env_steps_per_s']:.0f} "
            f"(model {p['env_steps_per_s']:.0f}), lag {lag} (model {p['policy_lag']:.0f}), "
            f"MiB/node {m['mib_per_node']:.1f} "
            f"(model {p['mib_per_node']:.1f})")
    ceiling = result.get("replay_ceiling")
    if ceiling:
        log(f"replay ceiling, {ceiling['servers']} servers at samples per insert {ceiling['samples_per_insert']:g}: "
            f"measured {ceiling['measured_inserts_per_s']:,.0f} inserts/s ({ceiling['cpu_us_per_insert']:.1f} us "
            f"per insert), model {ceiling['model_inserts_per_s']:,.0f}")
    import scaling

    return scaling.main(["--out", args.out])


if __name__ == "__main__":
    sys.exit(main())
