"""D4PG throughput on one machine: actor efficiency, learner feed, and the whole pipeline.

Three measurements, in one run on the same cores (default ``D4PGConfig``,
default ``D4PGBuilder``, cartpole:swingup):

1. Actor efficiency: environment steps per CPU-second of an actor process
   divided by raw stepping of the same task with random actions per
   CPU-second (the physical limit of one process). The actors are the REAL
   ``rlplat.distributed.workers.ActorWorker`` (NumPy policy + noise,
   ``NStepTransitionAdder``, ``RemoteVariableSource`` weight pulls every
   ``variable_update_period`` steps, ``run_steps`` chunks driven over Ray as
   the layout's driver does), each in its own Ray process with the actor
   runtime_env (BLAS threads 1) and TF threads 1. They write to a Reverb
   server hosted by a stand-in learner process (as the layout co-locates
   replay in the learner) whose table has a ``MinSize`` limiter, so inserts
   never wait: we measure what acting costs, not rate limiting. The stand-in
   answers every weight pull with a newer version (a learner is always
   ahead of its actors), so every pull moves the full policy. CPU is
   ``time.process_time`` of the actor process (all its threads, Ray's
   included), read at the start and end of a window of chunks; raw steppers
   run in processes with the same settings, as many in parallel as actors,
   in blocks just before and just after each window (their mean; blocks
   interleaved round by round; the median of the per-round ratios is kept).
   With ``--envs-per-actor K`` each actor steps K environments through the
   agent's vector actor (D4PG: ``GaussianVectorActor`` with a
   ``VectorNStepAdder``).
2. Learner: steps/s of the builder's learner fed from Reverb (the real
   ``make_learner`` / input_fn path, server in the same process and sampled
   through 127.0.0.1, as ``LearnerWorker`` does) against the same learner
   fed from one batch held in memory (the limit). Each learner alone in a
   process of its own, as in a learner worker (the same table and server in
   both), with the layout's learner thread counts; the two processes
   alternate, A B B A ..., and the median of the paired ratios is kept.
   (Learners sharing one process interfere with each other's figures, so
   each runs alone, as in training.)
2b. Learner precision (``learner_precision.py``): the memory-fed learner in
   fp32 against bf16 (``rlplat.precision``), one learner per process,
   alternating fp32 bf16 bf16 fp32 ...; the median of the per-round ratios
   is kept (issue 31's target on a bfloat16 CPU: >= 1.4).
3. System: env steps/s of ``run_on_ray`` (2 actors, default config:
   samples_per_insert 32, min_replay_size 1000) in steady state, read from
   the run's metrics.jsonl, against its learner-bound limit
   ``memory-fed learner steps/s x global_batch_size / samples_per_insert``.
   The CPU used by each role in that window is sampled from /proc.

    python bench/d4pg_throughput.py [--max-actor-steps 40000] [--out bench/results]

Writes d4pg_throughput.json (figures, breakdowns, where the time goes) and
d4pg_throughput.png under --out. Takes about 3-5 minutes on 2 cores. The
skeleton shared with ``impala_throughput.py`` (workers, rounds, the system
run, report and figure) is in ``throughput_kit.py`` and ``throughput_report.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import cpu_accounting as accounting  # noqa: E402
from bench import learner_precision  # noqa: E402
from bench import throughput_kit as kit  # noqa: E402
from bench import throughput_report as report_lib  # noqa: E402

ACTOR_EFFICIENCY_BAR = 0.4
ACTOR_EFFICIENCY_AIM = 0.6
LEARNER_FEED_TARGET = 0.9

# Part 1's figures in this bench's names (the kit's neutral name -> key), in report order.
ROUND_KEYS = {"raw_rate": "raw_steps_per_cpu_s", "raw_before_after": "raw_before_after_steps_per_cpu_s",
              "actor_rates": "actor_steps_per_cpu_s", "efficiency": "efficiency", "wall_rate": "env_steps_per_wall_s"}
RESULT_KEYS = {"efficiency": "efficiency", "efficiency_per_round": "efficiency_per_round",
               "actor_rate": "actor_steps_per_cpu_s", "raw_rate": "raw_steps_per_cpu_s",
               "raw_cpu_us": "raw_env_cpu_us_per_step", "raw_background_us": "raw_background_threads_cpu_us_per_step",
               "wall_rate": "env_steps_per_wall_s_all_actors"}


# ------------------------------------------------------- 1. actor efficiency
def actor_classes():
    """Part 1's Ray-side classes ``(StandInLearner, TimedActorWorker, RawStepper)``, with D4PG's stand-in."""
    return kit.ray_classes(_stand_in_learner)


def _stand_in_learner(base):
    """D4PG's stand-in learner on the kit's ``base`` (``kit.ray_classes`` calls this)."""
    import numpy as np

    class StandInLearner(base):
        """Hosts the Reverb server (builder's table, MinSize limiter so inserts never wait) and publishes weights."""

        def _start(self, builder, environment_spec, num_actors):
            import reverb  # pylint: disable=g-import-not-at-top
            import tensorflow as tf  # pylint: disable=g-import-not-at-top

            from rlplat_agents.d4pg import networks  # pylint: disable=g-import-not-at-top
            from rlplat.distributed.shared_weights import SharedWeightsWriter  # pylint: disable=g-import-not-at-top
            from rlplat.replay import server as replay_server  # pylint: disable=g-import-not-at-top

            (table,) = builder.make_replay_tables(environment_spec, num_actors)
            server = replay_server.make_server([table.replace(rate_limiter=reverb.rate_limiters.MinSize(1))])
            obs_size = int(np.prod(environment_spec.observations.shape))
            act_size = int(np.prod(environment_spec.actions.shape))
            policy = networks.make_policy_network(act_size, builder.config.policy_layer_sizes)
            policy(tf.zeros((1, obs_size)))
            self._serve(server, [np.array(v.numpy()) for v in policy.variables])  # D4PGLearner.get_variables
            # Like the real learner, publish versions in shared memory for actors on
            # this host, here at a fixed rate (a CPU learner makes a few per second).
            self._shared = SharedWeightsWriter(self._weights)
            self._shared.publish(0, self._weights)
            self._publisher = threading.Thread(target=self._publish_forever, daemon=True)
            self._publisher.start()

        def _publish_forever(self, versions_per_s=20.0):
            while True:
                time.sleep(1.0 / versions_per_s)
                self._version += 1
                self._shared.publish(self._version, self._weights)

        def shared_weights_info(self):
            return self._shared.info()

        def stats(self):
            return {"pulls": self._pulls, "items": self._items()}

    return StandInLearner


def measure_actors(args, builder, spec, log):
    """Part 1: efficiency of 1 and 2 real actors against raw stepping, and where an actor step's CPU goes."""
    run = kit.run_actor_rounds(
        args, builder, spec, actor_classes(), name=f"bench-learner-{os.getpid()}", warmup_chunks=1,
        warmup_raw_steps=2000, log=log,
        up_text="actors up (real ActorWorker over Ray, stand-in learner hosting Reverb with MinSize)",
        round_text=lambda rounds: (f"efficiency 1 actor {rounds[1][-1]['efficiency']:.3f}, "
                                   f"2 actors {rounds[2][-1]['efficiency']:.3f}"))
    # Each actor's one warm-up chunk, then every window's steps.
    total_steps = kit.NUM_ACTORS * run.chunk_steps + sum(
        w["steps"] for rs in run.rounds.values() for x in rs for w in x["windows"])
    return {
        "method": ("real rlplat.distributed.workers.ActorWorker (subclass only adds a thread-CPU "
                   "reading around run_steps) in Ray processes with runtime_env('actor') and TF "
                   "threads 1, driven in run_steps chunks of %d steps with one call in flight per "
                   "actor as the layout's driver does; weights pulled through RemoteVariableSource "
                   "from a stand-in learner that publishes 20 new versions a second in shared memory "
                   "(the actors' first pull goes through Ray, which always has a newer version); "
                   "Reverb server (MinSize limiter) in that stand-in learner's process. Efficiency = "
                   "(env steps / actor process CPU-s) / (random-action env steps / CPU-s of a process "
                   "with the same settings), raw blocks run just before and just after each actor block "
                   "(their mean) with as many raw processes in parallel as actors; median over rounds."
                   % run.chunk_steps),
        "chunk_steps": run.chunk_steps,
        "chunks_per_window": args.actor_chunks,
        "raw_steps_per_block": args.raw_steps,
        "rounds": args.actor_rounds,
        "variable_update_period": builder.config.variable_update_period,
        "replay_items_at_end": run.stand_in_stats["items"],
        "weight_pulls_served": run.stand_in_stats["pulls"],
        "actor_steps_run": total_steps,
        "weight_pulls_per_1000_actor_steps": round(1000.0 * run.stand_in_stats["pulls"] / total_steps, 3),
        "results": kit.actor_results(run.rounds, RESULT_KEYS),
        "per_round": kit.per_round(run.rounds, ROUND_KEYS),
    }


# ---------------------------------------------------------------- 2. learner
def learner_child(args):
    """Runs one learner (``--learner-kind``) alone in this process, with the layout's learner settings."""
    kit.learner_child_threads(args)
    import dm_env
    import numpy as np
    import reverb
    import tensorflow as tf

    from rlplat_agents.d4pg.builder import D4PGBuilder
    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat_agents.d4pg.learning import D4PGLearner
    from rlplat_envs import make_environment
    from rlplat import replication, specs
    from rlplat.replay import datasets
    from rlplat.replay import server as replay_server
    from rlplat.replay.signature import transition_signature

    builder = D4PGBuilder(config=D4PGConfig(precision=args.precision))
    cfg = builder.config
    with make_environment(args.env, seed=args.seed) as env:
        spec = specs.make_environment_spec(env)
    (table,) = builder.make_replay_tables(spec, kit.NUM_ACTORS)
    # MinSize: the learner must never wait for inserts here; we measure the feed, not the ratio.
    table = table.replace(rate_limiter=reverb.rate_limiters.MinSize(cfg.min_replay_size))
    server = replay_server.make_server([table])
    address = f"127.0.0.1:{server.port}"

    # Fill through the real adder, so items are chunked exactly as actors write them.
    rng = np.random.default_rng(args.seed)
    obs_shape, act_shape = spec.observations.shape, spec.actions.shape
    adder = builder.make_adder(address, spec)
    episode_len, written = 1000, 0
    t0 = time.perf_counter()
    while written < args.fill_items:
        obs = rng.normal(size=(episode_len + 1,) + obs_shape).astype(np.float32)
        actions = rng.uniform(-1, 1, (episode_len,) + act_shape).astype(np.float32)
        rewards = rng.uniform(0, 1, episode_len).astype(np.float32)
        adder.add_first(dm_env.restart(obs[0]))
        for t in range(episode_len):
            step = (dm_env.truncation(rewards[t], obs[t + 1]) if t == episode_len - 1
                    else dm_env.transition(rewards[t], obs[t + 1]))
            adder.add(actions[t], step)
        written += episode_len
    adder.close()
    fill_s = time.perf_counter() - t0

    repl = replication.make_replicator(num_replicas=1)
    feed = dict(signature=transition_signature(spec.observations, spec.actions),
                packing=builder.make_packing(spec))
    if args.learner_kind == "reverb":
        learner = builder.make_learner(spec, repl, address)
    else:
        batch = next(iter(datasets.make_transition_dataset(address, builder.replay_table,
                                                           cfg.global_batch_size, **feed)))
        learner = D4PGLearner(cfg, spec, repl, repl.distribute(tf.data.Dataset.from_tensors(batch).repeat()),
                              steps_per_call=builder.steps_per_call, jit_compile=builder.jit_compile)

    kit.timed_block(learner, 2 * builder.steps_per_call)  # trace
    kit.timed_block(learner, args.learner_warmup_steps)
    blocks = [kit.timed_block(learner, args.learner_block_steps) for _ in range(args.learner_blocks)]
    out = {"kind": args.learner_kind, "replay_items": written, "fill_seconds": round(fill_s, 2),
           "blocks": blocks}
    if args.learner_kind == "reverb":
        # Sampling alone, for the breakdown: CPU and wall per global batch.
        it = iter(datasets.make_transition_dataset(address, builder.replay_table, cfg.global_batch_size,
                                                   **feed))
        for _ in range(10):
            next(it)
        n_batches = 60
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(n_batches):
            next(it)
        out["sampling_only_cpu_ms_per_batch"] = round(1e3 * (time.process_time() - cpu0) / n_batches, 3)
        out["sampling_only_wall_ms_per_batch"] = round(1e3 * (time.perf_counter() - wall0) / n_batches, 3)
    with open(args.learner_child, "w") as f:
        json.dump(out, f)
    server.stop()


def measure_learner(args, builder, plan, log):
    """Part 2: Reverb-fed against memory-fed learner steps/s, each run a child process of its own, A B B A."""
    from rlplat.distributed import process

    def rate(block):
        return block["steps"] / block["wall_s"]

    threads = plan.learner_threads
    env = process.subprocess_env("learner", cpu_only=True, threads=threads[0])
    log(f"learner processes: TF threads {threads[0]}/{threads[1]} (the layout's plan), {args.learner_rounds} "
        f"pairs of runs (one learner per process), {args.learner_blocks} blocks of "
        f"{args.learner_block_steps} steps each after {args.learner_warmup_steps} untimed")

    def command(kind):
        return lambda path: [
            sys.executable, os.path.abspath(__file__), "--learner-child", path, "--learner-kind", kind,
            "--learner-threads", f"{threads[0]},{threads[1]}", "--env", args.env,
            "--seed", str(args.seed), "--learner-blocks", str(args.learner_blocks),
            "--learner-block-steps", str(args.learner_block_steps),
            "--learner-warmup-steps", str(args.learner_warmup_steps), "--fill-items", str(args.fill_items)]

    runs = {"reverb": [], "memory": []}
    for r in range(args.learner_rounds):
        for kind in (("reverb", "memory") if r % 2 == 0 else ("memory", "reverb")):  # A B B A: drift cancels
            runs[kind].append(kit.run_child(command(kind), env))
            log(f"  pair {r + 1}, {kind}-fed: "
                + ", ".join(f"{rate(b):.1f}" for b in runs[kind][-1]["blocks"]) + " steps/s")

    def run_rate(run):
        return accounting.median([rate(b) for b in run["blocks"]])

    blocks = {kind: [b for run in runs[kind] for b in run["blocks"]] for kind in runs}
    ratios = [run_rate(a) / run_rate(b) for a, b in zip(runs["reverb"], runs["memory"])]
    out = {
        "threads_intra_inter": list(threads),
        "steps_per_call": builder.steps_per_call,
        "global_batch_size": builder.config.global_batch_size,
        "block_steps": args.learner_block_steps,
        "blocks_per_run": args.learner_blocks,
        "untimed_steps_per_run": args.learner_warmup_steps,
        "rounds": args.learner_rounds,
        "replay_items": runs["reverb"][0]["replay_items"],
        "fill_seconds": runs["reverb"][0]["fill_seconds"],
        "reverb_steps_per_s": accounting.median([rate(b) for b in blocks["reverb"]]),
        "memory_steps_per_s": accounting.median([rate(b) for b in blocks["memory"]]),
        "ratio": accounting.median(ratios),
        "ratio_per_round": [round(x, 4) for x in ratios],
        **kit.per_step_figures(blocks),
        "sampling_only_cpu_ms_per_batch": accounting.median(
            [run["sampling_only_cpu_ms_per_batch"] for run in runs["reverb"]]),
        "sampling_only_wall_ms_per_batch": accounting.median(
            [run["sampling_only_wall_ms_per_batch"] for run in runs["reverb"]]),
        "samples": blocks,
    }
    out["method"] = ("builder.make_learner (the real input_fn / Reverb dataset path, CallRunner "
                     "watchdog thread included), server in the same process sampled through "
                     "127.0.0.1 as LearnerWorker does, table filled with %d items by the real "
                     "NStepTransitionAdder (same chunking as actors) and a MinSize limiter so "
                     "sampling never waits; the memory-fed learner is the same D4PGLearner on "
                     "one global batch (drawn from that table) repeated in a tf.data pipeline, in "
                     "a process of its own with the same server and table. Runs alternate "
                     "reverb, memory, memory, reverb, ...; ratio = median over pairs of (median "
                     "block steps/s of the reverb run / of the memory run)." % out["replay_items"])
    return out


def _measure_precision(args, plan, log):
    """Part 2b: the learner child (memory-fed) in fp32 and bf16, alternating (``learner_precision``)."""
    from rlplat.distributed import process

    threads = plan.learner_threads

    def command(path, precision):
        # Memory-fed: the table only yields the one batch, so a small fill (above min_replay_size) does.
        return [sys.executable, os.path.abspath(__file__), "--learner-child", path, "--learner-kind", "memory",
                "--precision", precision, "--learner-threads", f"{threads[0]},{threads[1]}", "--env", args.env,
                "--seed", str(args.seed), "--learner-blocks", str(args.learner_blocks),
                "--learner-block-steps", str(args.learner_block_steps),
                "--learner-warmup-steps", str(args.learner_warmup_steps), "--fill-items", "2000"]

    return learner_precision.measure(args, threads, command,
                                     process.subprocess_env("learner", cpu_only=True, threads=threads[0]), log)


# ----------------------------------------------------------------- 3. system
def measure_system(args, builder, learner_memory_steps_per_s, learner_reverb_steps_per_s, log):
    """Part 3: steady env steps/s of ``run_on_ray`` against the memory-fed learner's bound, and why it falls short."""
    cfg = builder.config
    run = kit.run_system(args, builder, log, prefix="d4pg_throughput_", evaluations="no evaluations until the "
                         "final one")
    env_rate, learn_rate = run.env_rate, run.learn_rate
    spi_recent = [r["samples_per_insert_recent"] for r in run.learner_window
                  if isinstance(r.get("samples_per_insert_recent"), (int, float))]
    limit = learner_memory_steps_per_s * cfg.global_batch_size / cfg.samples_per_insert
    env_per_learner = cfg.global_batch_size / cfg.samples_per_insert
    factors = None
    if env_rate and learn_rate and learner_reverb_steps_per_s:
        # ratio = feed x sharing x pacing, each measured on its own:
        factors = {
            "feed": learner_reverb_steps_per_s / learner_memory_steps_per_s,
            "sharing": learn_rate / learner_reverb_steps_per_s,
            "pacing": env_rate / learn_rate / env_per_learner,
            "explained": ("feed = Reverb-fed / memory-fed learner alone (part 2); sharing = learner "
                          "steps/s in the pipeline / Reverb-fed learner alone (what actors, inserts "
                          "and Ray take from its cores); pacing = measured env steps per learner step "
                          f"/ {env_per_learner:g} (the rate limiter's slack). ratio = feed x sharing x "
                          "pacing."),
        }
    return {
        "method": ("run_on_ray(D4PGBuilder(D4PGConfig()), 2 actors, local Ray, replay inside the "
                   "learner) as `rlplat train d4pg` runs it; steady-state env steps/s = least-squares "
                   "slope of actor_steps over wall time of the actor records in metrics.jsonl from "
                   f"{args.steady_from:.0%} of max_actor_steps on (warm-up, learner tracing and the "
                   "replay fill excluded); limit = memory-fed learner steps/s (part 2) x "
                   "global_batch_size / samples_per_insert. CPU per role sampled from /proc over the "
                   "same window."),
        "max_actor_steps": args.max_actor_steps,
        "samples_per_insert": cfg.samples_per_insert,
        "min_replay_size": cfg.min_replay_size,
        "env_steps_per_learner_step": env_per_learner,
        "env_steps_per_learner_step_measured": env_rate / learn_rate if env_rate and learn_rate else None,
        "ratio_factors": factors,
        "steady_window": run.steady_window(),
        "env_steps_per_s": env_rate,
        "learner_steps_per_s": learn_rate,
        "learner_limit_steps_per_s": learner_memory_steps_per_s,
        "env_steps_per_s_limit": limit,
        "ratio": env_rate / limit if env_rate and limit else None,
        "learner_ratio_vs_memory_fed": learn_rate / learner_memory_steps_per_s if learn_rate else None,
        "samples_per_insert_measured_recent": accounting.median(spi_recent),
        "cpu_in_window": run.cpu_in_window(),
        **run.tail(),
    }


# ------------------------------------------------------------------ report
def _where_actor(res):
    bd = res["per_step_us"]
    total = res["total_cpu_us_per_step"]
    raw = res["raw_env_cpu_us_per_step"]
    parts = sorted(bd.items(), key=lambda x: -x[1])
    text = ", ".join(f"{accounting.PART_LABELS[k]} {v:.0f} us ({100 * v / total:.0f}%)" for k, v in parts if v > 0.5)
    return (f"{res['num_actors']} actor(s): {total:.0f} CPU-us per step against {raw:.0f} us for a raw "
            f"random-action step; {text}. Everything but the env step is overhead: "
            f"{total - bd['env']:.0f} us/step; and the env step itself costs {bd['env'] - raw:+.0f} us more "
            "inside the loop than in a bare stepping loop (likely cache pressure: the policy's ~0.5 MB "
            "of weights and the adder run between two physics steps; not itemised).")


def _targets(report):
    targets, where = {}, {}
    if "precision" in report:
        pr = report["precision"]
        targets["learner_bf16_over_fp32"] = {"value": round(pr["ratio"], 4), "bar": pr["target_ratio"],
                                             "meets_bar": pr["ratio"] >= pr["target_ratio"],
                                             "cpu_bf16_flags": pr["cpu_bf16_flags"]}
    if "actor" in report:
        for k, res in report["actor"]["results"].items():
            eff = res["efficiency"]
            targets[f"actor_efficiency_{k}"] = {"value": round(eff, 4), "bar": ACTOR_EFFICIENCY_BAR,
                                                "aim": ACTOR_EFFICIENCY_AIM, "meets_bar": eff >= ACTOR_EFFICIENCY_BAR,
                                                "meets_aim": eff >= ACTOR_EFFICIENCY_AIM}
            if eff < ACTOR_EFFICIENCY_AIM:
                where[f"actor_{k}"] = _where_actor(res)
    if "learner" in report:
        ln = report["learner"]
        targets["learner_feed_ratio"] = {"value": round(ln["ratio"], 4), "target": LEARNER_FEED_TARGET,
                                         "met": ln["ratio"] >= LEARNER_FEED_TARGET}
        if ln["ratio"] < LEARNER_FEED_TARGET:
            extra_cpu = ln["reverb_cpu_ms_per_step"] - ln["memory_cpu_ms_per_step"]
            extra_wall = ln["reverb_wall_ms_per_step"] - ln["memory_wall_ms_per_step"]
            bound = ln["memory_cpu_ms_per_step"] / ln["reverb_cpu_ms_per_step"]
            where["learner"] = (
                f"Reverb-fed steps take {ln['reverb_wall_ms_per_step']:.2f} ms wall vs "
                f"{ln['memory_wall_ms_per_step']:.2f} ms from memory (+{extra_wall:.2f} ms) and "
                f"{ln['reverb_cpu_ms_per_step']:.2f} vs {ln['memory_cpu_ms_per_step']:.2f} CPU-ms "
                f"(+{extra_cpu:.2f} CPU-ms per step for the feed). The memory-fed step already keeps "
                f"{ln['memory_cores_used']:.2f} of the {report['cpus']} cores busy (TF threads "
                f"intra {ln['threads_intra_inter'][0]} / inter {ln['threads_intra_inter'][1]}: independent "
                "ops run side by side), so the feed cannot hide on an idle core: its CPU adds to the "
                "wall time, and "
                f"memory/reverb CPU per step = {bound:.2f} bounds the ratio on this box. Of the "
                f"+{extra_cpu:.2f} CPU-ms, sampling one global batch on its own (256 in-process Reverb "
                f"samples of items stored in compressed 32-step chunks, plus tf.data batching) costs "
                f"{ln['sampling_only_cpu_ms_per_batch']:.2f} CPU-ms; the rest is the input "
                "pipeline's threads contending with the step's threads (context switches, cache), "
                "not itemised further.")
    if "system" in report:
        sy = report["system"]
        targets["system_ratio"] = {"value": None if sy["ratio"] is None else round(sy["ratio"], 4),
                                   "note": "no fixed target; 1.0 is the learner-bound limit"}
        cpu = (sy.get("cpu_in_window") or {}).get("cores_by_role", {})
        busy = (sy.get("cpu_in_window") or {}).get("cores_busy_total")
        if sy["ratio"] is not None and sy["ratio"] < 0.95 and sy["learner_steps_per_s"]:
            where["system"] = (
                f"the learner runs at {sy['learner_steps_per_s']:.1f} steps/s in the pipeline vs "
                f"{sy['learner_limit_steps_per_s']:.1f} alone on the box from memory "
                f"({100 * (sy['learner_ratio_vs_memory_fed'] or 0):.0f}%); env steps follow it at "
                f"{sy['env_steps_per_learner_step']:g} per learner step (measured "
                f"{sy['env_steps_per_learner_step_measured'] or float('nan'):.2f}; samples/insert "
                f"{sy['samples_per_insert_measured_recent'] or float('nan'):.1f}). CPU in the steady window (cores of "
                f"{report['cpus']}; {busy} busy): " + report_lib.cores_text(cpu)
                + ". The learner loses what the actors, Reverb sampling/inserts and Ray take from the "
                "same cores.")
            f = sy.get("ratio_factors")
            if f:
                where["system"] += (
                    f" Factors: feed {f['feed']:.2f} (Reverb-fed vs memory-fed learner, part 2) x sharing "
                    f"{f['sharing']:.2f} (learner in the pipeline vs Reverb-fed alone) x pacing "
                    f"{f['pacing']:.2f} (env steps per learner step vs {sy['env_steps_per_learner_step']:g}) "
                    f"= {f['feed'] * f['sharing'] * f['pacing']:.2f}.")
    report["targets"] = targets
    report["where_time_goes"] = where



def _print_summary(report):
    print(report_lib.headline("D4PG", report))
    if "actor" in report:
        for k, res in report["actor"]["results"].items():
            bd = res["per_step_us"]
            print(f"actor efficiency, {k} actor(s): {res['efficiency']:.3f} (bar {ACTOR_EFFICIENCY_BAR}, aim "
                  f"{ACTOR_EFFICIENCY_AIM}); {res['actor_steps_per_cpu_s']:.0f} steps/CPU-s vs raw "
                  f"{res['raw_steps_per_cpu_s']:.0f}")
            print("   per step (CPU us): " + ", ".join(f"{p} {bd[p]:.1f}" for p in accounting.PARTS)
                  + f"; total {res['total_cpu_us_per_step']:.1f}")
    if "learner" in report:
        ln = report["learner"]
        print(f"learner: {ln['reverb_steps_per_s']:.1f} steps/s from Reverb vs {ln['memory_steps_per_s']:.1f} "
              f"from memory: ratio {ln['ratio']:.3f} (target {LEARNER_FEED_TARGET})")
    if "precision" in report:
        print(learner_precision.summary_line(report["precision"]))
    if "system" in report:
        sy = report["system"]
        print(f"system: {sy['env_steps_per_s']:.0f} env steps/s vs limit {sy['env_steps_per_s_limit']:.0f} "
              f"(= {sy['learner_limit_steps_per_s']:.1f} x {sy['env_steps_per_learner_step']:g}): ratio "
              f"{sy['ratio']:.3f}; learner {sy['learner_steps_per_s'] or float('nan'):.1f} steps/s in the pipeline")
    for key, text in report.get("where_time_goes", {}).items():
        print(f"where time goes ({key}): {text}")
    print(f"total {report['seconds']['total']:.0f} s")


def _plot(report, path):
    plt, fig, axes = report_lib.figure(3 if "precision" in report else 2, 4.5)
    (ax_eff, ax_bd), (ax_ln, ax_sys) = axes[:2]
    if "precision" in report:
        learner_precision.plot(axes[2][0], report["precision"])
        axes[2][1].axis("off")
    if "actor" in report:
        res = report["actor"]["results"]
        keys = sorted(res)
        effs = [res[k]["efficiency"] for k in keys]
        lo = [max(0.0, res[k]["efficiency"] - min(res[k]["efficiency_per_round"])) for k in keys]
        hi = [max(0.0, max(res[k]["efficiency_per_round"]) - res[k]["efficiency"]) for k in keys]
        bars = ax_eff.bar([f"{k} actor{'s' if k != '1' else ''}" for k in keys], effs, yerr=[lo, hi],
                          capsize=4, color="tab:blue")
        ax_eff.bar_label(bars, fmt="%.3f")
        ax_eff.axhline(ACTOR_EFFICIENCY_BAR, color="tab:red", ls="--", lw=1, label="bar 0.4")
        ax_eff.axhline(ACTOR_EFFICIENCY_AIM, color="tab:green", ls="--", lw=1, label="aim 0.6")
        ax_eff.set_ylim(0, 1.05)
        ax_eff.set_ylabel("env steps per actor CPU-s / raw steps per CPU-s")
        ax_eff.set_title("Actor efficiency (median of rounds; range)", fontsize=10)
        ax_eff.legend(fontsize=8)

        report_lib.plot_cpu_breakdown(plt, ax_bd, res, unit="step", raw_key="raw_env_cpu_us_per_step", headroom=1.55)
    if "learner" in report:
        ln = report["learner"]
        report_lib.bar_panel(
            ax_ln, ["from Reverb\n(input_fn)", "from memory\n(one batch)"],
            [ln["reverb_steps_per_s"], ln["memory_steps_per_s"]], ["tab:orange", "tab:gray"], fmt="%.1f",
            top=1.25 * ln["memory_steps_per_s"], ylabel="learner steps / s (median of blocks)",
            title=(f"Learner feed: ratio {ln['ratio']:.3f} (target {LEARNER_FEED_TARGET}); steps_per_call "
                   f"{ln['steps_per_call']}, TF threads {ln['threads_intra_inter'][0]}/{ln['threads_intra_inter'][1]}"))
        ax_ln.axhline(LEARNER_FEED_TARGET * ln["memory_steps_per_s"], color="tab:green", ls="--", lw=1,
                      label=f"target: {LEARNER_FEED_TARGET:g} x memory-fed")
        ax_ln.legend(fontsize=8, loc="upper left")
    if "system" in report:
        sy = report["system"]
        report_lib.bar_panel(
            ax_sys, ["run_on_ray\n(steady state)", "learner-bound\nlimit"],
            [sy["env_steps_per_s"], sy["env_steps_per_s_limit"]], ["tab:purple", "tab:gray"], fmt="%.0f",
            top=1.3 * max(sy["env_steps_per_s"], sy["env_steps_per_s_limit"]), ylabel="env steps / s",
            title=f"System, 2 actors, samples/insert {sy['samples_per_insert']:g}: ratio {sy['ratio']:.3f}")
        cpu = (sy.get("cpu_in_window") or {}).get("cores_by_role")
        lines = [f"learner {sy['learner_steps_per_s'] or float('nan'):.1f} steps/s in the pipeline, "
                 f"{sy['learner_limit_steps_per_s']:.1f} alone from memory"]
        if cpu:
            lines.append("cores used: " + report_lib.cores_text(cpu, at_least=0.01))
        f = sy.get("ratio_factors")
        if f:
            lines.append(f"ratio = feed {f['feed']:.2f} x sharing {f['sharing']:.2f} x pacing {f['pacing']:.2f}")
        ax_sys.text(0.02, 0.97, "\n".join(lines), transform=ax_sys.transAxes, fontsize=7.5, va="top")
    report_lib.save_figure(plt, fig, "D4PG", report, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    report_lib.add_actor_arguments(parser, env="cartpole:swingup", actor_chunks=6, raw_steps=5000)
    parser.add_argument("--learner-rounds", type=int, default=8,
                        help="pairs of learner runs (Reverb-fed, memory-fed), each in its own process")
    parser.add_argument("--learner-blocks", type=int, default=4, help="timed blocks per learner run")
    parser.add_argument("--learner-block-steps", type=int, default=300)
    parser.add_argument("--learner-warmup-steps", type=int, default=240,
                        help="untimed learner steps per run after tracing")
    parser.add_argument("--fill-items", type=int, default=20_000)
    parser.add_argument("--precision-rounds", type=int, default=4,
                        help="rounds of one fp32 and one bf16 memory-fed learner (part 2b)")
    report_lib.add_run_arguments(parser, max_actor_steps=40_000, parts="actor,learner,precision,system",
                          name="d4pg_throughput")
    parser.add_argument("--memory-steps-per-s", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--learner-kind", choices=("reverb", "memory"), default="reverb", help=argparse.SUPPRESS)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.learner_child:
        return learner_child(args)

    started = time.time()
    log = report_lib.logger(started)

    from rlplat_agents.d4pg.builder import D4PGBuilder
    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat_envs import make_environment
    from rlplat import specs
    from rlplat.distributed import resources

    parts = set(args.parts.split(","))
    builder = D4PGBuilder(config=D4PGConfig())
    with make_environment(args.env, seed=args.seed) as env:
        spec = specs.make_environment_spec(env)
    plan = resources.plan_resources(os.cpu_count(), 0, kit.NUM_ACTORS, None)
    report = report_lib.new_report(
        "d4pg_throughput", __file__, args, placement=plan.describe(), config=builder.config.to_dict(),
        envs_per_actor=args.envs_per_actor,
        builder={"steps_per_call": builder.steps_per_call,
                 "variable_update_period": builder.config.variable_update_period,
                 "jit_compile": builder.jit_compile, "sigma_schedule": builder.sigma_schedule})

    def system():
        mem = report.get("learner", {}).get("memory_steps_per_s") or args.memory_steps_per_s
        if mem is None:
            raise SystemExit("--parts system needs the learner part (its memory-fed rate is the limit)")
        return measure_system(args, builder, mem, report.get("learner", {}).get("reverb_steps_per_s"), log)

    report_lib.run_parts(report, parts, [("actor", lambda: measure_actors(args, builder, spec, log)),
                                  ("learner", lambda: measure_learner(args, builder, plan, log)),
                                  ("precision", lambda: _measure_precision(args, plan, log)),
                                  ("system", system)])
    report["seconds"]["total"] = round(time.time() - started, 1)
    _targets(report)
    return report_lib.write_outputs(report, args, _plot, _print_summary)


if __name__ == "__main__":
    main()
