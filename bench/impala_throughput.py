"""IMPALA throughput on one machine: actors vs raw stepping, learner feed, the whole pipeline.

Three measurements, in one run on the same cores (default ``IMPALAConfig``,
default ``IMPALABuilder``, gym:CartPole-v1):

1. Actors: env frames/s, and frames per CPU-second, of 1 and 2 REAL
   ``rlplat.distributed.workers.ActorWorker`` processes (NumPy policy,
   ``SequenceAdder`` unrolls, ``RemoteVariableSource`` pulls every
   ``variable_update_period`` steps, ``run_steps`` chunks driven over Ray
   with one call in flight per actor, as the layout's driver does), against
   random-action stepping of the same env in as many processes with the same
   Ray settings. The actors write into the builder's real Reverb queue,
   hosted by a stand-in learner process that drains it through the
   learner's own dataset (``builder.make_dataset``) in a thread and answers
   every weight pull with a newer version (all pulls move the weights).
   Blocks alternate raw, actors, raw, round by round (the raw blocks on
   both sides of a window are averaged); medians of rounds are kept.
   The per-frame CPU breakdown (env, policy, Reverb write, Ray) comes from
   the loop's own timers and per-thread CPU from /proc.
2. Learner: frames/s (unrolls x T per second) of ``builder.make_learner``
   fed from a Reverb queue (the real input_fn path, server in the same
   process and sampled through 127.0.0.1 as ``LearnerWorker`` does; the
   queue pre-filled through the real ``SequenceAdder`` so every sampled
   unroll is new) against the same ``IMPALALearner`` fed one batch held in
   memory. Own process with the layout's learner thread counts; blocks
   interleaved; median of paired ratios.
3. System: env frames/s of ``run_on_ray`` (2 actors, learning included, as
   ``rlplat train impala`` runs it) over a steady window read from the run's
   metrics.jsonl; the headline number against the 5,000 frames/s target.
   CPU per role in the window is sampled from /proc.

    python bench/impala_throughput.py [--max-actor-steps 600000] [--out bench/results]

Writes impala_throughput.json and impala_throughput.png under --out. The
skeleton shared with ``d4pg_throughput.py`` (workers, rounds, the system run,
report and figure) is in ``throughput_kit.py`` and ``throughput_report.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import cpu_accounting as accounting  # noqa: E402
from bench import throughput_kit as kit  # noqa: E402
from bench import throughput_report as report_lib  # noqa: E402

SYSTEM_TARGET_FRAMES_PER_S = 5000.0
_median = accounting.median

# Part 1's figures in this bench's names (the kit's neutral name -> key), in report order.
ROUND_KEYS = {"raw_rate": "raw_frames_per_cpu_s", "raw_before_after": "raw_before_after_frames_per_cpu_s",
              "raw_wall_rate": "raw_frames_per_wall_s_all", "actor_rates": "actor_frames_per_cpu_s",
              "efficiency": "efficiency", "wall_rate": "frames_per_wall_s_all"}
RESULT_KEYS = {"wall_rate": "env_frames_per_s", "raw_wall_rate": "raw_env_frames_per_s",
               "actor_rate": "frames_per_cpu_s_per_actor", "raw_rate": "raw_frames_per_cpu_s",
               "efficiency": "efficiency", "efficiency_per_round": "efficiency_per_round",
               "raw_cpu_us": "raw_env_cpu_us_per_frame", "raw_background_us": "raw_background_threads_cpu_us_per_frame"}


# ------------------------------------------------------------------ 1. actors
def actor_classes():
    """Part 1's Ray-side classes ``(StandInLearner, TimedActorWorker, RawStepper)``, with IMPALA's stand-in."""
    return kit.ray_classes(_stand_in_learner)


def _stand_in_learner(base):
    """IMPALA's stand-in learner on the kit's ``base`` (``kit.ray_classes`` calls this)."""
    import numpy as np

    class StandInLearner(base):
        """Hosts the builder's queue, drains it like the learner, serves ever-newer weights."""

        def _start(self, builder, environment_spec, num_actors):
            from rlplat_agents.impala import networks  # pylint: disable=g-import-not-at-top
            from rlplat.replay import server as replay_server  # pylint: disable=g-import-not-at-top

            server = replay_server.make_server(builder.make_replay_tables(environment_spec, num_actors))
            net = networks.make_network(environment_spec, builder.config)
            self._serve(server, [np.array(v.numpy()) for v in networks.acting_variables(net)])
            self._drained, self._stop = 0, threading.Event()
            # Short sampling timeout: an idle queue (between blocks) restarts the iterator.
            self._drain_builder = dataclasses.replace(builder, rate_limiter_timeout_ms=2000)
            self._spec = environment_spec
            self._thread = threading.Thread(target=self._drain, daemon=True)
            self._thread.start()

        def _drain(self):
            batch = self._drain_builder.config.global_batch_size
            while not self._stop.is_set():
                try:
                    for _ in self._drain_builder.make_dataset(self._address, self._spec, batch):
                        self._drained += batch
                        if self._stop.is_set():
                            return
                except Exception:  # pylint: disable=broad-except  (timeout on an idle queue)
                    time.sleep(0.05)

        def shared_weights_info(self):
            return None  # every pull goes over Ray

        def stats(self):
            return {"pulls": self._pulls, "drained_unrolls": self._drained, "queue_size_now": self._items()}

    return StandInLearner


def _round_text(rounds):
    one, two = rounds[1][-1], rounds[2][-1]
    return (f"1 actor {one['wall_rate']:.0f} frames/s ({statistics.mean(one['actor_rates']):.0f}/CPU-s, raw "
            f"{one['raw_rate']:.0f}/CPU-s); 2 actors {two['wall_rate']:.0f} frames/s")


def measure_actors(args, builder, spec, log):
    """Part 1: frames/s and frames per CPU-s of 1 and 2 real actors against raw stepping, and their CPU."""
    run = kit.run_actor_rounds(
        args, builder, spec, actor_classes(), name=f"bench-impala-learner-{os.getpid()}", warmup_chunks=3,
        warmup_raw_steps=5000, log=log, round_text=_round_text,
        up_text="actors up (real ActorWorker over Ray; stand-in learner hosts the queue and drains it)")
    return {
        "method": ("real ActorWorker (subclass adds only a thread-CPU reading) in Ray processes with "
                   f"runtime_env('actor'), run_steps chunks of {run.chunk_steps} steps, one call in flight "
                   "per actor; the builder's real Reverb queue in a stand-in learner process that drains "
                   "it with builder.make_dataset in a thread and answers every pull with a newer "
                   "version. Raw: random actions in as many Ray processes with the same settings, run "
                   "just before and just after each actor block (their mean). Per CPU-s = frames / "
                   "actor process CPU (all threads); "
                   "efficiency = that / raw frames per CPU-s. Medians over rounds. The served weights are "
                   "an untrained network's, so CartPole episodes last ~20-25 frames: per-episode costs "
                   "(reset, the padded last unroll, the adder's end-of-episode flush) weigh more per "
                   "frame here than late in training (500-frame episodes)."),
        "chunk_steps": run.chunk_steps, "chunks_per_window": args.actor_chunks,
        "raw_steps_per_block": args.raw_steps, "rounds": args.actor_rounds,
        "variable_update_period": builder.config.variable_update_period,
        "stand_in": run.stand_in_stats,
        "results": kit.actor_results(run.rounds, RESULT_KEYS),
        "per_round": kit.per_round(run.rounds, ROUND_KEYS),
    }


# ----------------------------------------------------------------- 2. learner
def learner_child(args):
    """Runs in its own process with the layout's learner settings: queue-fed vs memory-fed."""
    threads = kit.learner_child_threads(args)
    import dm_env
    import numpy as np
    import tensorflow as tf

    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig
    from rlplat_agents.impala.learning import IMPALALearner
    from rlplat_envs import make_environment
    from rlplat import replication, specs
    from rlplat.replay import server as replay_server
    from rlplat.replay import tables

    builder = IMPALABuilder(config=IMPALAConfig())
    cfg = builder.config
    with make_environment(args.env, seed=args.seed) as env:
        spec = specs.make_environment_spec(env)
    batch, unroll = cfg.global_batch_size, cfg.unroll_length
    per_call = builder.steps_per_call
    block = per_call * max(1, args.learner_block_steps // per_call)
    warm = 3 * per_call
    need = batch * (2 * warm + args.learner_rounds * block + 1)
    # The builder's queue type, sized to hold every unroll this benchmark consumes:
    # each is sampled once, as in training, and the learner never waits for inserts.
    table = tables.make_queue_table(builder.replay_table, need + batch, builder.signature(spec))
    server = replay_server.make_server([table])
    address = f"127.0.0.1:{server.port}"

    rng = np.random.default_rng(args.seed)
    obs_size = int(np.prod(spec.observations.shape))
    num_actions = int(spec.actions.num_values)
    adder = builder.make_adder(address, spec)
    episode_len, written = 500, 0
    t0 = time.perf_counter()
    while written < need:
        obs = rng.normal(size=(episode_len + 1, obs_size)).astype(np.float32)
        logits = rng.normal(size=(episode_len, num_actions)).astype(np.float32)
        actions = rng.integers(0, num_actions, episode_len).astype(np.float32)
        adder.add_first(dm_env.restart(obs[0]))
        for t in range(episode_len):
            step = (dm_env.truncation(1.0, obs[t + 1]) if t == episode_len - 1
                    else dm_env.transition(1.0, obs[t + 1]))
            adder.add(actions[t], step, extras={"logits": logits[t]}, behaviour_log_prob=-0.69,
                      policy_version=0)
        written += episode_len // unroll
    adder.close()
    fill_s = time.perf_counter() - t0

    repl = replication.make_replicator(num_replicas=1)
    queue_learner = builder.make_learner(spec, repl, address)
    one = next(iter(builder.make_dataset(address, spec, batch)))
    memory_learner = IMPALALearner(cfg, spec, repl, repl.distribute(tf.data.Dataset.from_tensors(one).repeat()),
                                   steps_per_call=per_call)

    for learner in (queue_learner, memory_learner):  # trace + warm up
        kit.timed_block(learner, per_call)
        kit.timed_block(learner, warm - per_call)
    samples = {"queue": [], "memory": []}
    frames = batch * unroll
    for r in range(args.learner_rounds):
        samples["queue"].append(kit.timed_block(queue_learner, block))
        samples["memory"].append(kit.timed_block(memory_learner, block))
        q, m = samples["queue"][-1], samples["memory"][-1]
        print(f"  round {r + 1}: queue {frames * q['steps'] / q['wall_s']:.0f} frames/s, memory "
              f"{frames * m['steps'] / m['wall_s']:.0f}", flush=True)

    def rate(x):
        return frames * x["steps"] / x["wall_s"]

    ratios = [rate(a) / rate(b) for a, b in zip(samples["queue"], samples["memory"])]
    out = {
        "threads_intra_inter": list(threads), "steps_per_call": per_call,
        "global_batch_size": batch, "unroll_length": unroll, "frames_per_learner_step": frames,
        "block_steps": block, "rounds": args.learner_rounds,
        "queue_unrolls_written": written, "fill_seconds": round(fill_s, 2),
        "queue_frames_per_s": _median([rate(x) for x in samples["queue"]]),
        "memory_frames_per_s": _median([rate(x) for x in samples["memory"]]),
        "ratio": _median(ratios), "ratio_per_round": [round(x, 4) for x in ratios],
        **kit.per_step_figures(samples),
        "samples": samples,
    }
    out["queue_learner_steps_per_s"] = out["queue_frames_per_s"] / frames
    out["memory_learner_steps_per_s"] = out["memory_frames_per_s"] / frames
    with open(args.learner_child, "w") as f:
        json.dump(out, f)
    server.stop()


def _learner_threads():
    try:
        from rlplat.distributed import resources

        return tuple(resources.plan_resources(os.cpu_count() or 1, 0, kit.NUM_ACTORS, None).learner_threads)
    except Exception:  # pylint: disable=broad-except  (the plan's API is not this bench's concern)
        return (1, 2)


def measure_learner(args, log):
    """Part 2: queue-fed against memory-fed learner frames/s, in one child process with the layout's threads."""
    from rlplat.distributed import process

    threads = _learner_threads()
    env = process.subprocess_env("learner", cpu_only=True, threads=threads[0])
    log(f"learner process: TF threads {threads[0]}/{threads[1]} (the layout's plan), "
        f"{args.learner_rounds} rounds of {args.learner_block_steps} steps, queue then memory")
    out = kit.run_child(lambda path: [
        sys.executable, os.path.abspath(__file__), "--learner-child", path,
        "--learner-threads", f"{threads[0]},{threads[1]}", "--env", args.env, "--seed", str(args.seed),
        "--learner-rounds", str(args.learner_rounds), "--learner-block-steps", str(args.learner_block_steps)],
        env, timeout=900)
    out["method"] = ("builder.make_learner (the real input_fn: Reverb dataset of the queue, one worker, "
                     "prefetch 1; CallRunner watchdog included), server in the same process sampled "
                     "through 127.0.0.1 as LearnerWorker does; a make_queue_table queue pre-filled by the "
                     "real SequenceAdder with enough unrolls for the whole measurement (each sampled "
                     "once). Memory-fed: the same IMPALALearner on one global batch from that queue, "
                     "repeated in tf.data. Blocks interleaved queue, memory, ...; ratio = median of "
                     "per-round queue/memory rates. Frames = learner steps x global_batch_size x "
                     "unroll_length.")
    return out


# ------------------------------------------------------------------ 3. system
def measure_system(args, builder, log):
    """Part 3: steady env frames/s of ``run_on_ray`` with learning on, and the learner's frames/s in it."""
    cfg = builder.config
    run = kit.run_system(args, builder, log, prefix="impala_throughput_",
                         evaluations="learning on, one final evaluation", sampler=accounting.LearnerThreadSampler())
    env_rate, learn_rate = run.env_rate, run.learn_rate
    # Every step of a sampled unroll counts, the zero padding after an episode's
    # end included (its last unroll is padded to T+1): the queue hands out each
    # unroll once, yet consumed/produced reads above 1 when episodes are short.
    frames = cfg.global_batch_size * cfg.unroll_length
    lags = [r["policy_lag_mean"] for r in run.learner_window if isinstance(r.get("policy_lag_mean"), (int, float))]
    return {
        "method": ("run_on_ray(IMPALABuilder(IMPALAConfig()), 2 actors, local Ray, queue inside the "
                   "learner) as `rlplat train impala` runs it, learning on; steady env frames/s = "
                   "least-squares slope of actor steps over wall time of the actor records in "
                   f"metrics.jsonl from {args.steady_from:.0%} of max_actor_steps on (Ray start, imports, "
                   "tracing excluded). Learner frames/s = its steps/s slope x global_batch_size x "
                   "unroll_length over the same window. CPU per role sampled from /proc."),
        "max_actor_steps": args.max_actor_steps,
        "steady_window": run.steady_window(),
        "env_frames_per_s": env_rate,
        "learner_steps_per_s": learn_rate,
        "learner_frames_per_s": learn_rate * frames if learn_rate else None,
        "consumed_over_produced": (learn_rate * frames / env_rate) if env_rate and learn_rate else None,
        "policy_lag_mean_in_window": _median(lags),
        "cpu_in_window": run.cpu_in_window(),
        "learner_process_cores_by_thread": run.sampler.learner_threads_between(run.t0, run.t1),
        **run.tail(),
    }


# ------------------------------------------------------------------- report
def _where_time_goes(report):
    where = {}
    sy = report.get("system")
    if sy and (sy["env_frames_per_s"] or 0) < SYSTEM_TARGET_FRAMES_PER_S:
        cpu = (sy.get("cpu_in_window") or {}).get("cores_by_role", {})
        text = (f"pipeline {sy['env_frames_per_s']:.0f} env frames/s < {SYSTEM_TARGET_FRAMES_PER_S:.0f}; "
                f"learner consumes {sy['learner_frames_per_s'] or float('nan'):.0f} frames/s in it. CPU "
                "cores by role in the window: " + report_lib.cores_text(cpu))
        ln = report.get("learner")
        if ln:
            text += (f". Learner alone: {ln['queue_frames_per_s']:.0f} frames/s from the queue, "
                     f"{ln['memory_frames_per_s']:.0f} from memory")
        where["system"] = text
    ac = report.get("actor", {}).get("results", {})
    for k, res in ac.items():
        bd = res["per_step_us"]
        total = res["total_cpu_us_per_step"]
        parts = ", ".join(f"{accounting.PART_LABELS[p]} {v:.1f} us"
                          for p, v in sorted(bd.items(), key=lambda x: -x[1]) if v > 0.5)
        where[f"actor_{k}"] = (f"{total:.1f} CPU-us per frame vs {res['raw_env_cpu_us_per_frame']:.1f} for a raw "
                               f"random-action frame: {parts}")
    return where


def _print_summary(report):
    print(report_lib.headline("IMPALA", report))
    for k, res in report.get("actor", {}).get("results", {}).items():
        grouped = res["per_step_us_grouped"]
        print(f"actors x{k}: {res['env_frames_per_s']:.0f} env frames/s (raw x{k}: {res['raw_env_frames_per_s']:.0f}); "
              f"{res['frames_per_cpu_s_per_actor']:.0f} frames/CPU-s per actor vs raw "
              f"{res['raw_frames_per_cpu_s']:.0f} (efficiency {res['efficiency']:.3f})")
        print("   CPU us per frame: " + ", ".join(f"{p} {v:.1f}" for p, v in grouped.items())
              + f"; total {res['total_cpu_us_per_step']:.1f}")
    ln = report.get("learner")
    if ln:
        print(f"learner: {ln['queue_frames_per_s']:.0f} frames/s from the queue vs {ln['memory_frames_per_s']:.0f} "
              f"from memory (ratio {ln['ratio']:.3f}; {ln['queue_learner_steps_per_s']:.1f} vs "
              f"{ln['memory_learner_steps_per_s']:.1f} steps/s)")
    sy = report.get("system")
    if sy:
        met = (sy["env_frames_per_s"] or 0) >= SYSTEM_TARGET_FRAMES_PER_S
        print(f"system (2 actors, learning on): {sy['env_frames_per_s']:.0f} env frames/s "
              f"({'meets' if met else 'MISSES'} target {SYSTEM_TARGET_FRAMES_PER_S:.0f}); "
              f"learner {sy['learner_frames_per_s'] or float('nan'):.0f} "
              f"frames/s in the pipeline")
        cpu = (sy.get("cpu_in_window") or {}).get("cores_by_role")
        if cpu:
            print("   cores by role in the window: " + report_lib.cores_text(cpu))
        threads = sy.get("learner_process_cores_by_thread")
        if threads:
            print("   learner process, cores by thread: " + report_lib.cores_text(dict(list(threads.items())[:8])))
    for key, text in report.get("where_time_goes", {}).items():
        print(f"where the time goes ({key}): {text}")
    print(f"load average at the end {report['load_average'].get('end')}; total {report['seconds']['total']:.0f} s")


def _plot(report, path):
    plt, fig, ((ax_a, ax_bd), (ax_ln, ax_sys)) = report_lib.figure(2, 4.5)
    res = report.get("actor", {}).get("results", {})
    if res:
        keys = sorted(res)
        x = range(len(keys))
        width = 0.38
        b1 = ax_a.bar([i - width / 2 for i in x], [res[k]["env_frames_per_s"] for k in keys], width,
                      label="IMPALA actors (env frames/s, wall)", color="tab:blue")
        b2 = ax_a.bar([i + width / 2 for i in x], [res[k]["raw_env_frames_per_s"] for k in keys], width,
                      label="raw random stepping, same # processes", color="tab:gray")
        ax_a.bar_label(b1, fmt="%.0f", fontsize=8)
        ax_a.bar_label(b2, fmt="%.0f", fontsize=8)
        ax_a.set_xticks(list(x), [f"{k} process{'es' if k != '1' else ''}\n"
                                  f"per CPU-s: {res[k]['frames_per_cpu_s_per_actor']:.0f}"
                                  f" vs {res[k]['raw_frames_per_cpu_s']:.0f}" for k in keys])
        ax_a.set_ylabel("env frames / s")
        ax_a.set_title("Actors vs raw env stepping (median of rounds)", fontsize=10)
        ax_a.legend(fontsize=8)
        report_lib.plot_cpu_breakdown(plt, ax_bd, res, unit="frame", raw_key="raw_env_cpu_us_per_frame",
                                      headroom=1.6)
    ln = report.get("learner")
    if ln:
        report_lib.bar_panel(
            ax_ln, ["from the Reverb queue\n(input_fn)", "from memory\n(one batch)"],
            [ln["queue_frames_per_s"], ln["memory_frames_per_s"]], ["tab:orange", "tab:gray"], fmt="%.0f",
            top=1.25 * max(ln["queue_frames_per_s"], ln["memory_frames_per_s"]),
            ylabel="learner frames / s (unrolls x T)",
            title=(f"Learner alone: ratio {ln['ratio']:.3f}; batch {ln['global_batch_size']} x T "
                   f"{ln['unroll_length']}, TF threads {ln['threads_intra_inter'][0]}/{ln['threads_intra_inter'][1]}"))
    sy = report.get("system")
    if sy:
        cpu = (sy.get("cpu_in_window") or {}).get("cores_by_role")
        title = "System: run_on_ray, 2 actors"
        if cpu:
            title += "\ncores: " + report_lib.cores_text(cpu, at_least=0.02)
        report_lib.bar_panel(
            ax_sys, ["env frames/s\n(2 actors, learning on)", "learner frames/s\nin the pipeline"],
            [sy["env_frames_per_s"] or 0, sy["learner_frames_per_s"] or 0], ["tab:purple", "tab:orange"],
            fmt="%.0f", top=1.3 * max(sy["env_frames_per_s"] or 0, SYSTEM_TARGET_FRAMES_PER_S),
            ylabel="frames / s (steady window)", title=title, title_size=9)
        ax_sys.axhline(SYSTEM_TARGET_FRAMES_PER_S, color="tab:green", ls="--", lw=1, label="target 5,000")
        ax_sys.legend(fontsize=8, loc="upper right")
    report_lib.save_figure(plt, fig, "IMPALA", report, path)



def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    report_lib.add_actor_arguments(parser, env="gym:CartPole-v1", actor_chunks=15, raw_steps=30_000)
    parser.add_argument("--learner-rounds", type=int, default=8)
    parser.add_argument("--learner-block-steps", type=int, default=200)
    report_lib.add_run_arguments(parser, max_actor_steps=600_000, parts="actor,learner,system",
                                 name="impala_throughput")
    args = parser.parse_args(argv)
    if args.learner_child:
        return learner_child(args)
    parts = set(args.parts.split(","))
    unknown = parts - {"actor", "learner", "system"}
    if unknown:
        raise SystemExit(f"unknown --parts {sorted(unknown)}; use a comma list of actor,learner,system")

    started = time.time()
    log = report_lib.logger(started)

    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig
    from rlplat_envs import make_environment
    from rlplat import specs

    builder = IMPALABuilder(config=IMPALAConfig())
    with make_environment(args.env, seed=args.seed) as env:
        spec = specs.make_environment_spec(env)
    report = report_lib.new_report(
        "impala_throughput", __file__, args, config=builder.config.to_dict(),
        builder={"steps_per_call": builder.steps_per_call, "replay_table": builder.replay_table},
        targets={"system_env_frames_per_s": SYSTEM_TARGET_FRAMES_PER_S})
    report_lib.run_parts(report, parts, [("actor", lambda: measure_actors(args, builder, spec, log)),
                                         ("learner", lambda: measure_learner(args, log)),
                                         ("system", lambda: measure_system(args, builder, log))])
    report["load_average"]["end"] = accounting.load_average()
    report["seconds"]["total"] = round(time.time() - started, 1)
    if "system" in report:
        fps = report["system"]["env_frames_per_s"] or 0.0
        report["targets"]["system_met"] = fps >= SYSTEM_TARGET_FRAMES_PER_S
    report["where_time_goes"] = _where_time_goes(report)
    return report_lib.write_outputs(report, args, _plot, _print_summary)


if __name__ == "__main__":
    main()
