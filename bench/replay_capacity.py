"""One Reverb server's insert and sample capacity against the number of writer processes.

The server runs in its own process (its CPU is read from /proc) with the D4PG
table (uniform, FIFO) and a size-only rate limiter, so nothing throttles but
the server itself. Writers are light processes: each writes synthetic D4PG
transitions (the cartpole shapes) through the real ``NStepTransitionAdder``
at a fixed offered rate, for a fixed time, after a common start. Two parts:

1. **Inserts.** For N = 1, 2, 4, ... writers: offered vs achieved inserts/s
   and the server's CPU microseconds per insert.
2. **Samples.** One sampler reads batches of 256 through the learner's own
   dataset (``make_transition_dataset``) as fast as it can, alone and with
   the writers running: items sampled/s and server CPU microseconds per
   sampled item.

From the per-item server costs, ``capacity`` derives what one server core
can take: inserts/s at D4PG's samples-per-insert (each insert also costs
``samples_per_insert`` sampled items), and how many D4PG actors that is at
an actor's measured env steps/s (``d4pg_throughput.json``). Every figure
carries the machine; the writers share its cores with the server, so the
per-item costs, not the totals, carry over to other machines.

``--agent impala`` does the same with IMPALA's items: unrolls of
``unroll_length`` CartPole steps written by the real ``SequenceAdder`` (one
item per unroll), sampled through the IMPALA learner's own dataset, each
unroll consumed once; the server's table is a FIFO table of the queue's
signature that never blocks writers, so each side's cost is its own.

    python bench/replay_capacity.py [--agent d4pg|impala] [--writers 1,2,4,8,16] [--rate R] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

OBS_SIZE, ACTION_SIZE, EPISODE = 5, 1, 1000
# IMPALA's CartPole: 4 observations, 2 actions; 500-step episodes (a trained policy's).
IMPALA_OBS_SIZE, IMPALA_NUM_ACTIONS, IMPALA_EPISODE = 4, 2, 500
JOIN_TIMEOUT_S = 120.0


def _spec():
    import dm_env.specs as dm_specs
    import numpy as np

    from rlplat import specs

    return specs.EnvironmentSpec(
        observations=dm_specs.Array((OBS_SIZE,), np.float32),
        actions=dm_specs.BoundedArray((ACTION_SIZE,), np.float32, -1.0, 1.0),
        rewards=dm_specs.Array((), np.float32), discounts=dm_specs.BoundedArray((), np.float32, 0.0, 1.0))


def _quiet():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ processes
def _impala_spec():
    import dm_env.specs as dm_specs
    import numpy as np

    from rlplat import specs

    return specs.EnvironmentSpec(
        observations=dm_specs.Array((IMPALA_OBS_SIZE,), np.float32),
        actions=dm_specs.DiscreteArray(IMPALA_NUM_ACTIONS, np.int64),
        rewards=dm_specs.Array((), np.float32), discounts=dm_specs.BoundedArray((), np.float32, 0.0, 1.0))


def _tables(agent):
    """The agent's table, with nothing to throttle the server: a size-only limiter and room for all."""
    import reverb

    if agent == "d4pg":
        from rlplat_agents.d4pg.builder import D4PGBuilder

        (table,) = D4PGBuilder().make_replay_tables(_spec(), 1)
        return [table.replace(rate_limiter=reverb.rate_limiters.MinSize(1))]
    from rlplat_agents.impala.builder import IMPALABuilder

    # IMPALA's queue holds queue_size unrolls and blocks writers when full; a
    # FIFO table of the same signature lets writers run alone and a sampler
    # re-read what they wrote, so each side's cost is measured by itself.
    builder = IMPALABuilder()
    return [reverb.Table(builder.replay_table, sampler=reverb.selectors.Uniform(),
                         remover=reverb.selectors.Fifo(), max_size=1_000_000,
                         rate_limiter=reverb.rate_limiters.MinSize(1),
                         signature=builder.signature(_impala_spec()))]


def _server(agent, port_queue, stop) -> None:
    _quiet()
    from rlplat.replay import server as replay_server

    server = replay_server.make_server(_tables(agent))
    port_queue.put(server.port)
    stop.wait(3600)
    server.stop()


def _make_writer_step(agent, address):
    """``(first(), step(t, last))``: the agent's real adder fed synthetic CartPole-shaped steps."""
    import dm_env
    import numpy as np

    rng = np.random.default_rng(os.getpid())
    if agent == "d4pg":
        from rlplat_agents.d4pg.builder import D4PGBuilder

        adder = D4PGBuilder().make_adder(address, _spec())
        obs = rng.normal(size=(EPISODE + 1, OBS_SIZE)).astype(np.float32)
        actions = rng.uniform(-1, 1, (EPISODE, ACTION_SIZE)).astype(np.float32)

        def step(t, last):
            timestep = dm_env.truncation(0.5, obs[t + 1]) if last else dm_env.transition(0.5, obs[t + 1])
            adder.add(actions[t], timestep)
    else:
        from rlplat_agents.impala.builder import IMPALABuilder

        adder = IMPALABuilder().make_adder(address, _impala_spec())
        obs = rng.normal(size=(EPISODE + 1, IMPALA_OBS_SIZE)).astype(np.float32)
        logits = rng.normal(size=(EPISODE, IMPALA_NUM_ACTIONS)).astype(np.float32)
        actions = rng.integers(0, IMPALA_NUM_ACTIONS, EPISODE).astype(np.float32)

        def step(t, last):
            timestep = dm_env.truncation(1.0, obs[t + 1]) if last else dm_env.transition(1.0, obs[t + 1])
            adder.add(actions[t], timestep, extras={"logits": logits[t]}, behaviour_log_prob=-0.69,
                      policy_version=1)
    return adder, (lambda: adder.add_first(dm_env.restart(obs[0]))), step


def _writer(agent, address, rate, seconds, ready, start, results) -> None:
    _quiet()
    adder, first, step = _make_writer_step(agent, address)
    ready.put(os.getpid())
    start.wait(JOIN_TIMEOUT_S)
    t0, steps, t = time.perf_counter(), 0, 0
    cpu0 = time.process_time()
    episode = EPISODE if agent == "d4pg" else IMPALA_EPISODE
    first()
    while True:
        now = time.perf_counter() - t0
        if now >= seconds:
            break
        ahead = steps / rate - now  # pace to the offered rate
        if ahead > 0:
            time.sleep(ahead)
        last = t == episode - 1
        step(t, last)
        steps += 1
        t = 0 if last else t + 1
        if last:
            first()
    items = getattr(adder, "num_items", None)
    adder.close()
    results.put({"written": steps if items is None else items, "env_steps": steps,
                 "seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - cpu0})


def _sampler(agent, address, batch_size, seconds, ready, start, results) -> None:
    _quiet()
    from rlplat.replay import datasets
    from rlplat.replay.signature import transition_signature

    if agent == "d4pg":
        from rlplat_agents.d4pg.builder import D4PGBuilder

        builder = D4PGBuilder()
        spec = _spec()
        dataset = datasets.make_transition_dataset(
            address, builder.replay_table, batch_size,
            signature=transition_signature(spec.observations, spec.actions), packing=builder.make_packing(spec))
    else:  # the learner's own pipeline (one sampling worker, FIFO order), at its batch
        from rlplat_agents.impala.builder import IMPALABuilder

        dataset = IMPALABuilder().make_dataset(address, _impala_spec(), batch_size)
    it = iter(dataset)
    next(it)  # connect and trace before the clock starts
    ready.put(os.getpid())
    start.wait(JOIN_TIMEOUT_S)
    t0, batches = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        next(it)
        batches += 1
    results.put({"sampled": batches * batch_size, "seconds": time.perf_counter() - t0})


def _run_phase(ctx, agent, server_pid, address, num_writers, rate, seconds, sample,
               batch_size) -> Dict[str, Any]:
    ready, results, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_writer, args=(agent, address, rate, seconds, ready, start, results))
             for _ in range(num_writers)]
    if sample:
        procs.append(ctx.Process(target=_sampler, args=(agent, address, batch_size, seconds, ready, start,
                                                        results)))
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=JOIN_TIMEOUT_S)
    cpu0, t0 = _cpu_seconds(server_pid), time.perf_counter()
    start.set()
    outs = [results.get(timeout=seconds + JOIN_TIMEOUT_S) for _ in procs]
    wall, server_cpu = time.perf_counter() - t0, _cpu_seconds(server_pid) - cpu0
    for p in procs:
        p.join(JOIN_TIMEOUT_S)
    written = sum(o.get("written", 0) for o in outs)
    env_steps = sum(o.get("env_steps", 0) for o in outs)
    sampled = sum(o.get("sampled", 0) for o in outs)
    writer_s = max([o["seconds"] for o in outs if "written" in o] or [seconds])
    return {"num_writers": num_writers, "sampler": sample,
            "offered_env_steps_per_s": num_writers * rate,
            "env_steps": env_steps, "env_steps_per_s": env_steps / writer_s,
            "achieved_fraction": (env_steps / writer_s) / (num_writers * rate) if num_writers else None,
            "inserts_per_s": written / writer_s,
            "writer_cpu_us_per_insert": (1e6 * sum(o["cpu_s"] for o in outs if "written" in o) / written
                                         if written else None),
            "sampled_items_per_s": sampled / seconds if sample else 0.0,
            "server_cores_used": server_cpu / wall,
            "server_cpu_s": server_cpu, "wall_s": wall, "inserted": written, "sampled": sampled}


# --------------------------------------------------------------------- model
def capacity(inserts: List[Dict[str, Any]], sample_only: Dict[str, Any], samples_per_insert: float,
             actor_steps_per_s: float, env_steps_per_insert: float = 1.0, agent: str = "d4pg") -> Dict[str, Any]:
    """What one server core takes, from the measured per-item server costs.

    The insert cost comes from the runs whose writers got at least 95% of
    what they offered (the server kept up), so it is a cost, not a ceiling.
    An insert is one item: a D4PG transition (one env step) or an IMPALA
    unroll (``env_steps_per_insert`` env steps, measured).
    """
    kept = [r for r in inserts if r["achieved_fraction"] and r["achieved_fraction"] >= 0.95] or inserts
    insert_us = sum(1e6 * r["server_cpu_s"] for r in kept) / sum(r["inserted"] for r in kept)
    sample_us = 1e6 * sample_only["server_cpu_s"] / max(1, sample_only["sampled"])
    per_insert_with_sampling = insert_us + samples_per_insert * sample_us
    inserts_per_core = 1e6 / per_insert_with_sampling
    actors = inserts_per_core * env_steps_per_insert / actor_steps_per_s
    return {"agent": agent, "server_cpu_us_per_insert": insert_us, "server_cpu_us_per_sampled_item": sample_us,
            "samples_per_insert": samples_per_insert,
            "server_cpu_us_per_insert_with_its_samples": per_insert_with_sampling,
            "inserts_per_s_per_server_core": inserts_per_core,
            "inserts_per_s_per_server_core_no_sampling": 1e6 / insert_us,
            "env_steps_per_insert": env_steps_per_insert,
            "env_steps_per_s_per_server_core": inserts_per_core * env_steps_per_insert,
            f"{agent}_actor_env_steps_per_s": actor_steps_per_s,
            f"{agent}_actors_per_server_core": actors}


def _actor_rate(agent: str) -> Tuple[float, str]:
    """One actor's env steps per CPU-second (its own core), from the throughput bench's JSON.

    D4PG: ``d4pg_throughput.json``; IMPALA: the vectorised actor with the
    most environments per actor that was measured
    (``impala_throughput_actor_envs<K>.json``, what a scaled-out run would
    use), else ``impala_throughput.json``. Fallbacks when none was run:
    5,000 / 25,000.
    """
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    if agent == "d4pg":
        sources = [("d4pg_throughput.json", "actor_steps_per_cpu_s")]
    else:
        prefix = "impala_throughput_actor_envs"
        vectorised = sorted((int(name[len(prefix):-len(".json")]), name) for name in os.listdir(results)
                            if name.startswith(prefix) and name[len(prefix):-len(".json")].isdigit())
        sources = [(name, "frames_per_cpu_s_per_actor") for _, name in reversed(vectorised)]
        sources.append(("impala_throughput.json", "frames_per_cpu_s_per_actor"))
    for name, key in sources:
        try:
            with open(os.path.join(results, name)) as f:
                return float(json.load(f)["actor"]["results"]["1"][key]), f"{name} actor.results.1.{key}"
        except (OSError, KeyError, ValueError):
            continue
    return (5000.0 if agent == "d4pg" else 25000.0), "a guess: no throughput result found"


def plot(report: Dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["inserts"]
    agent = report["capacity"]["agent"]
    n = [r["num_writers"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(n, [r["offered_env_steps_per_s"] for r in rows], "k--", label="offered")
    a.plot(n, [r["env_steps_per_s"] for r in rows], "o-", label="achieved")
    a.set_xscale("log", base=2)
    a.set_xlabel("writer processes")
    a.set_ylabel("env steps/s written")
    a.legend()
    a.set_title(f"{agent} writers (no sampler)")
    b.plot(n, [1e6 * r["server_cpu_s"] / max(1, r["inserted"]) for r in rows], "o-")
    b.set_xscale("log", base=2)
    b.set_xlabel("writer processes")
    b.set_ylabel("server CPU us per insert (item)")
    cap = report["capacity"]
    b.set_title(f"one server core: {cap['env_steps_per_s_per_server_core']:,.0f} env steps/s at SPI "
                f"{cap['samples_per_insert']:g} = {cap[f'{agent}_actors_per_server_core']:.1f} "
                f"{agent.upper()} actors", fontsize=9)
    m = report["machine"]
    fig.suptitle(f"Reverb capacity ({agent}), {m['cpu_model']} ({m['cpus']} cores)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agent", choices=("d4pg", "impala"), default="d4pg",
                        help="whose items: D4PG transitions, or IMPALA unrolls (default: d4pg)")
    parser.add_argument("--writers", default="1,2,4,8,16", help="writer process counts")
    parser.add_argument("--rate", type=float, default=None,
                        help="offered env steps/s per writer (default: 2000 for d4pg, 20000 for impala)")
    parser.add_argument("--seconds", type=float, default=8.0, help="per phase")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="sampler batch (default: the agent's global batch: 256 / 8 unrolls)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--name", default=None, help="output name (default: replay_capacity[_impala])")
    args = parser.parse_args(argv)
    try:
        counts = [int(x) for x in args.writers.split(",")]
    except ValueError:
        parser.error(f"--writers takes comma-separated counts such as 1,2,4 (got {args.writers!r})")
    impala = args.agent == "impala"
    args.rate = args.rate if args.rate is not None else (20000.0 if impala else 2000.0)
    args.batch_size = args.batch_size if args.batch_size is not None else (8 if impala else 256)
    args.name = args.name or ("replay_capacity_impala" if impala else "replay_capacity")
    if min(counts) < 1 or max(counts) > 64 or args.rate <= 0 or args.seconds <= 0 or args.batch_size < 1:
        parser.error("--writers must be 1-64 each, --rate, --seconds and --batch-size above 0")

    from seeds import machine

    ctx = mp.get_context("spawn")
    port_queue, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=_server, args=(args.agent, port_queue, stop), daemon=True)
    server.start()
    unit = "unrolls" if impala else "inserts"
    try:
        address = f"127.0.0.1:{port_queue.get(timeout=JOIN_TIMEOUT_S)}"
        inserts = []
        for n in counts:
            inserts.append(_run_phase(ctx, args.agent, server.pid, address, n, args.rate, args.seconds, False,
                                      args.batch_size))
            r = inserts[-1]
            print(f"{n:3d} writers: {r['env_steps_per_s']:8.0f}/{r['offered_env_steps_per_s']:.0f} env steps/s, "
                  f"{r['inserts_per_s']:.0f} {unit}/s, server {r['server_cores_used']:.2f} cores, "
                  f"{1e6 * r['server_cpu_s'] / max(1, r['inserted']):.1f} us per item", flush=True)
        sample_only = _run_phase(ctx, args.agent, server.pid, address, 0, args.rate, args.seconds, True,
                                 args.batch_size)
        print(f"sampler alone: {sample_only['sampled_items_per_s']:.0f} items/s, server "
              f"{sample_only['server_cores_used']:.2f} cores", flush=True)
        mixed = _run_phase(ctx, args.agent, server.pid, address, counts[len(counts) // 2], args.rate,
                           args.seconds, True, args.batch_size)
        print(f"sampler with {mixed['num_writers']} writers: {mixed['sampled_items_per_s']:.0f} items/s, "
              f"{mixed['inserts_per_s']:.0f} {unit}/s", flush=True)
    finally:
        stop.set()
        server.join(JOIN_TIMEOUT_S)
    if impala:  # each unroll is consumed once
        samples_per_insert = 1.0
        env_steps_per_insert = sum(r["env_steps"] for r in inserts) / max(1, sum(r["inserted"] for r in inserts))
    else:
        from rlplat_agents.d4pg.config import D4PGConfig

        samples_per_insert, env_steps_per_insert = D4PGConfig().samples_per_insert, 1.0
    actor_rate, actor_rate_source = _actor_rate(args.agent)
    report = {"benchmark": "replay_capacity", "agent": args.agent, "machine": machine(), "settings": vars(args),
              "load_average": os.getloadavg(), "inserts": inserts, "sample_only": sample_only,
              "sample_with_writers": mixed,
              "capacity": capacity(inserts, sample_only, samples_per_insert, actor_rate,
                                   env_steps_per_insert, args.agent),
              "actor_rate_source": actor_rate_source}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(report, f, indent=1)
    plot(report, os.path.join(args.out, f"{args.name}.png"))
    cap = report["capacity"]
    print(f"server CPU: {cap['server_cpu_us_per_insert']:.1f} us per item written, "
          f"{cap['server_cpu_us_per_sampled_item']:.2f} us per item sampled; one server core takes "
          f"{cap['inserts_per_s_per_server_core_no_sampling']:.0f} items/s alone, "
          f"{cap['inserts_per_s_per_server_core']:.0f} with samples-per-insert {samples_per_insert:g} "
          f"= {cap['env_steps_per_s_per_server_core']:,.0f} env steps/s "
          f"= {cap[f'{args.agent}_actors_per_server_core']:.1f} {args.agent.upper()} actors at "
          f"{cap[f'{args.agent}_actor_env_steps_per_s']:,.0f} env steps/s each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
