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
   the loop's own timers and per-thread CPU from /proc (helpers in
   bench/cpu_accounting.py, shared with bench/d4pg_throughput.py).
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

Writes impala_throughput.json and impala_throughput.png under --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)

from bench import cpu_accounting as accounting  # noqa: E402
from bench import seeds as seeds_lib  # noqa: E402

SYSTEM_TARGET_FRAMES_PER_S = 5000.0
_median, _slope, _load = accounting.median, accounting.slope, accounting.load_average


# ------------------------------------------------------------------ 1. actors
def _actor_classes():
    """Ray-side classes of part 1 (pickled by value: defined in this script)."""
    import numpy as np

    from rlplat.distributed import process
    from rlplat.distributed import workers
    from rlplat.distributed.learner_service import WeightServer

    class StandInLearner(WeightServer):
        """Hosts the builder's queue, drains it like the learner, serves ever-newer weights."""

        def __init__(self, builder, environment_spec, num_actors):
            process.setup_worker(1, 1, hide_gpus=True)
            import reverb  # pylint: disable=g-import-not-at-top

            from rlplat_agents.impala import networks  # pylint: disable=g-import-not-at-top
            from rlplat.replay import server as replay_server  # pylint: disable=g-import-not-at-top

            self._server = replay_server.make_server(builder.make_replay_tables(environment_spec, num_actors))
            self._address = f"127.0.0.1:{self._server.port}"
            self._client = reverb.Client(self._address)
            net = networks.make_network(environment_spec, builder.config)
            self._weights = [np.array(v.numpy()) for v in networks.acting_variables(net)]
            self._version, self._pulls = 0, 0
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

        def replay_address(self):
            return self._address

        def get_variables(self, names):
            return self._version, {name: self._weights for name in names}

        def get_variables_if_newer(self, names, version):
            self._version = max(self._version, int(version)) + 1
            self._pulls += 1
            return self.get_variables(names)

        def shared_weights_info(self):
            return None  # every pull goes over Ray

        def stats(self):
            info = self._client.server_info()
            return {"pulls": self._pulls, "drained_unrolls": self._drained,
                    "queue_size_now": int(sum(t.current_size for t in info.values()))}

    class TimedActorWorker(workers.ActorWorker):
        """The real ActorWorker; run_steps also reports its thread's CPU time."""

        def run_steps(self, num_steps):
            self._exec_ident = threading.get_ident()
            cpu0 = time.thread_time()
            stats = super().run_steps(num_steps)
            stats["thread_cpu_s"] = time.thread_time() - cpu0
            return stats

        def cpu_snapshot(self):
            ident = getattr(self, "_exec_ident", None)
            exec_cpu = (time.clock_gettime(time.pthread_getcpuclockid(ident))
                        if ident is not None else None)
            return {"process_cpu_s": time.process_time(), "exec_thread_cpu_s": exec_cpu,
                    "threads": accounting.thread_cpu_table(), "pid": os.getpid(),
                    "time": time.perf_counter()}

    class RawStepper:
        """Steps the env with precomputed random actions: the per-process limit."""

        def __init__(self, env_name, seed):
            from dm_env import specs  # pylint: disable=g-import-not-at-top

            from rlplat_envs import make_environment  # pylint: disable=g-import-not-at-top

            self._env = make_environment(env_name, seed=seed)
            self._spec = self._env.action_spec()
            self._discrete = isinstance(self._spec, specs.DiscreteArray)
            self._rng = np.random.default_rng(seed)
            self._timestep = None

        def _actions(self, n):
            if self._discrete:
                return self._rng.integers(0, self._spec.num_values, n).astype(np.int32)
            low = np.broadcast_to(self._spec.minimum, self._spec.shape)
            high = np.broadcast_to(self._spec.maximum, self._spec.shape)
            return self._rng.uniform(low, high, (n,) + tuple(self._spec.shape)).astype(np.float32)

        def run(self, num_steps):
            actions = self._actions(num_steps)
            env, timestep = self._env, self._timestep
            threads0 = accounting.thread_cpu_table()
            cpu0, wall0, main0 = time.process_time(), time.perf_counter(), time.thread_time()
            for i in range(num_steps):
                if timestep is None or timestep.last():
                    env.reset()
                timestep = env.step(actions[i])
            main = time.thread_time() - main0
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            self._timestep = timestep
            background = accounting.thread_diff(threads0, accounting.thread_cpu_table(),
                                             exclude=threading.get_native_id())
            return {"steps": num_steps, "cpu_s": cpu, "wall_s": wall, "main_thread_cpu_s": main,
                    "background_threads": background}

    return StandInLearner, TimedActorWorker, RawStepper


def measure_actors(args, builder, spec, log):
    import ray
    from ray import cloudpickle

    from rlplat import seeding
    from rlplat.distributed import cluster, process, workers
    from rlplat.runners import EnvironmentFactory, RayLayoutConfig

    # The Ray-side classes call the CPU-accounting helpers; ship them by value
    # (workers need not find bench/ on their path).
    cloudpickle.register_pickle_by_value(accounting)
    chunk_steps = RayLayoutConfig().actor_chunk_steps
    conn = cluster.connect(None)
    StandInLearner, TimedActorWorker, RawStepper = _actor_classes()
    name = f"bench-impala-learner-{os.getpid()}"
    learner = workers.remote(StandInLearner, num_cpus=0, max_concurrency=4, name=name,
                             runtime_env=process.runtime_env("learner")).remote(builder, spec, 2)
    actor_cls = workers.remote(TimedActorWorker, num_cpus=0, max_restarts=0,
                               runtime_env=process.runtime_env("actor"))
    raw_cls = workers.remote(RawStepper, num_cpus=0, runtime_env=process.runtime_env("actor"))
    actors = [actor_cls.remote(builder, EnvironmentFactory(args.env), i, seeding.actor_seed(args.seed, i), name, None,
                               envs_per_actor=args.envs_per_actor)
              for i in range(2)]
    raws = [raw_cls.remote(args.env, seeding.actor_seed(args.seed, 100 + i)) for i in range(2)]
    ray.get(learner.replay_address.remote(), timeout=300)
    ray.get([a.info.remote() for a in actors], timeout=300)
    # Warm-up: the adder's writer, the first pulls, the drain's dataset, caches.
    ray.get([a.run_steps.remote(chunk_steps) for a in actors for _ in range(3)]
            + [r.run.remote(5000) for r in raws], timeout=300)
    log(f"actors up (real ActorWorker over Ray; stand-in learner hosts the queue and drains it); "
        f"{args.actor_rounds} rounds")

    rounds = {1: [], 2: []}
    for r in range(args.actor_rounds):
        for k in (1, 2):
            before, windows, after = accounting.window_between_raw_blocks(
                ray, actors[:k], raws, chunk_steps, args.actor_chunks, args.raw_steps)
            raw = before + after
            raw_rate = accounting.steps_per_cpu_s(raw)
            rates = [w["steps"] / w["process_cpu_s"] for w in windows]
            rounds[k].append({
                "raw_frames_per_cpu_s": raw_rate, "raw": raw,
                "raw_before_after_frames_per_cpu_s": [
                    round(accounting.steps_per_cpu_s(half), 1) for half in (before, after)],
                "raw_frames_per_wall_s_all": statistics.mean(
                    sum(x["steps"] for x in half) / max(x["wall_s"] for x in half) for half in (before, after)),
                "actor_frames_per_cpu_s": rates,
                "efficiency": statistics.mean(rates) / raw_rate,
                "frames_per_wall_s_all": sum(w["steps"] for w in windows) / max(
                    w["window_wall_s"] for w in windows),
                "windows": windows,
            })
        log(f"  round {r + 1}: 1 actor {rounds[1][-1]['frames_per_wall_s_all']:.0f} frames/s "
            f"({statistics.mean(rounds[1][-1]['actor_frames_per_cpu_s']):.0f}/CPU-s, raw "
            f"{rounds[1][-1]['raw_frames_per_cpu_s']:.0f}/CPU-s); 2 actors "
            f"{rounds[2][-1]['frames_per_wall_s_all']:.0f} frames/s")
    replay = ray.get(learner.stats.remote(), timeout=60)
    for handle in actors + raws + [learner]:
        ray.kill(handle, no_restart=True)
    cluster.disconnect(conn)  # part 3's run_on_ray starts its own Ray, as `rlplat train` does

    results = {}
    for k, rs in rounds.items():
        windows = [w for x in rs for w in x["windows"]]
        bd = accounting.breakdown_us(windows)
        raw_items = [item for x in rs for item in x["raw"]]
        raw_steps = sum(item["steps"] for item in raw_items)
        raw_bg = sum(max(0.0, item["cpu_s"] - item["main_thread_cpu_s"]) for item in raw_items)
        raw_rate = _median([x["raw_frames_per_cpu_s"] for x in rs])
        results[str(k)] = {
            "num_actors": k,
            "env_frames_per_s": _median([x["frames_per_wall_s_all"] for x in rs]),
            "raw_env_frames_per_s": _median([x["raw_frames_per_wall_s_all"] for x in rs]),
            "frames_per_cpu_s_per_actor": _median([statistics.mean(x["actor_frames_per_cpu_s"]) for x in rs]),
            "raw_frames_per_cpu_s": raw_rate,
            "efficiency": _median([x["efficiency"] for x in rs]),
            "efficiency_per_round": [round(x["efficiency"], 4) for x in rs],
            "raw_env_cpu_us_per_frame": 1e6 / raw_rate,
            "raw_background_threads_cpu_us_per_frame": round(1e6 * raw_bg / raw_steps, 2),
            **bd,
        }
    return {
        "method": ("real ActorWorker (subclass adds only a thread-CPU reading) in Ray processes with "
                   f"runtime_env('actor'), run_steps chunks of {chunk_steps} steps, one call in flight "
                   "per actor; the builder's real Reverb queue in a stand-in learner process that drains "
                   "it with builder.make_dataset in a thread and answers every pull with a newer "
                   "version. Raw: random actions in as many Ray processes with the same settings, run "
                   "just before and just after each actor block (their mean). Per CPU-s = frames / "
                   "actor process CPU (all threads); "
                   "efficiency = that / raw frames per CPU-s. Medians over rounds. The served weights are "
                   "an untrained network's, so CartPole episodes last ~20-25 frames: per-episode costs "
                   "(reset, the padded last unroll, the adder's end-of-episode flush) weigh more per "
                   "frame here than late in training (500-frame episodes)."),
        "chunk_steps": chunk_steps, "chunks_per_window": args.actor_chunks,
        "raw_steps_per_block": args.raw_steps, "rounds": args.actor_rounds,
        "variable_update_period": builder.config.variable_update_period,
        "stand_in": replay,
        "results": results,
        "per_round": {str(k): [{key: v for key, v in x.items() if key not in ("windows", "raw")}
                               for x in rs] for k, rs in rounds.items()},
    }


# ----------------------------------------------------------------- 2. learner
def learner_child(args):
    """Runs in its own process with the layout's learner settings: queue-fed vs memory-fed."""
    threads = tuple(int(x) for x in args.learner_threads.split(","))
    from rlplat.distributed import process

    process.setup_worker(threads[0], threads[1], hide_gpus=True, num_cpu_replicas=1)
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

    def run_block(learner, steps):
        n0 = learner.num_steps
        cpu0, wall0 = time.process_time(), time.perf_counter()
        while learner.num_steps - n0 < steps:
            learner.step()
        return {"steps": learner.num_steps - n0, "wall_s": time.perf_counter() - wall0,
                "cpu_s": time.process_time() - cpu0}

    for learner in (queue_learner, memory_learner):  # trace + warm up
        run_block(learner, per_call)
        run_block(learner, warm - per_call)
    samples = {"queue": [], "memory": []}
    frames = batch * unroll
    for r in range(args.learner_rounds):
        samples["queue"].append(run_block(queue_learner, block))
        samples["memory"].append(run_block(memory_learner, block))
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
        "queue_cpu_ms_per_step": _median([1e3 * x["cpu_s"] / x["steps"] for x in samples["queue"]]),
        "memory_cpu_ms_per_step": _median([1e3 * x["cpu_s"] / x["steps"] for x in samples["memory"]]),
        "queue_wall_ms_per_step": _median([1e3 * x["wall_s"] / x["steps"] for x in samples["queue"]]),
        "memory_wall_ms_per_step": _median([1e3 * x["wall_s"] / x["steps"] for x in samples["memory"]]),
        "queue_cores_used": _median([x["cpu_s"] / x["wall_s"] for x in samples["queue"]]),
        "memory_cores_used": _median([x["cpu_s"] / x["wall_s"] for x in samples["memory"]]),
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

        return tuple(resources.plan_resources(os.cpu_count() or 1, 0, 2, None).learner_threads)
    except Exception:  # pylint: disable=broad-except  (the plan's API is not this bench's concern)
        return (1, 2)


def measure_learner(args, log):
    from rlplat.distributed import process

    threads = _learner_threads()
    env = process.subprocess_env("learner", cpu_only=True, threads=threads[0])
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [sys.executable, os.path.abspath(__file__), "--learner-child", path,
           "--learner-threads", f"{threads[0]},{threads[1]}", "--env", args.env, "--seed", str(args.seed),
           "--learner-rounds", str(args.learner_rounds), "--learner-block-steps", str(args.learner_block_steps)]
    log(f"learner process: TF threads {threads[0]}/{threads[1]} (the layout's plan), "
        f"{args.learner_rounds} rounds of {args.learner_block_steps} steps, queue then memory")
    subprocess.run(cmd, env=env, check=True, timeout=900)
    with open(path) as f:
        out = json.load(f)
    os.unlink(path)
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
class _LearnerThreadSampler(accounting.CpuSampler):
    """Also samples the learner process's CPU per thread name (which threads eat its core)."""

    def _run(self):
        self.threads = []  # (time.time(), {(pid, tid): (name, cpu_s)})
        while not self._stop.is_set():
            now = time.time()
            self.samples.append((now, accounting.processes_cpu(), accounting.system_cpu()))
            pids = [pid for pid, (role, _) in self.samples[-1][1].items() if role == "learner"]
            self.threads.append((now, _threads_of(pids)))
            self._stop.wait(self._period)

    def learner_threads_between(self, t0, t1):
        inside = [s for s in getattr(self, "threads", []) if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return None
        (ta, a), (tb, b) = inside[0], inside[-1]
        by_name = {}
        for key, (name, cpu) in b.items():
            delta = cpu - a.get(key, (name, 0.0))[1]
            # Ray names its threads; TF, Reverb and gRPC pool threads keep the process title.
            label = name if not name.startswith("ray::") else "(unnamed: TF/Reverb/gRPC pools, main)"
            by_name[label] = by_name.get(label, 0.0) + max(0.0, delta)
        return {k: round(v / (tb - ta), 3) for k, v in sorted(by_name.items(), key=lambda x: -x[1]) if v > 0}


def _threads_of(pids):
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            out[(pid, int(tid))] = (stat[stat.index("(") + 1:stat.rindex(")")],
                                    (int(fields[11]) + int(fields[12])) / tick)
    return out


def measure_system(args, builder, log):
    from rlplat.runners import Experiment, RayLayoutConfig, run_on_ray

    cfg = builder.config
    logdir = tempfile.mkdtemp(prefix="impala_throughput_")
    log(f"run_on_ray: 2 actors, {args.max_actor_steps:,} actor steps, learning on, one final "
        f"evaluation, logdir {logdir}")
    sampler = _LearnerThreadSampler().start()
    started = time.time()
    try:
        experiment = Experiment(builder, args.env, num_actors=2, max_actor_steps=args.max_actor_steps,
                                logdir=logdir, seed=args.seed, eval_every_actor_steps=0, checkpoint_every_s=3600.0)
        summary = run_on_ray(experiment, RayLayoutConfig(console=False))
    finally:
        sampler.stop()
    wall = time.time() - started
    actor, learner = [], []
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("role") == "actor":
                actor.append(rec)
            elif rec.get("role") == "learner":
                learner.append(rec)
    first = args.steady_from * args.max_actor_steps
    window = [r for r in actor if first <= r["step"] <= args.max_actor_steps]
    t0, t1 = window[0]["wall_time"], window[-1]["wall_time"]
    env_rate = _slope([(r["wall_time"], r["step"]) for r in window])
    lwin = [r for r in learner if t0 <= r["wall_time"] <= t1]
    learn_rate = _slope([(r["wall_time"], r["step"]) for r in lwin])
    # Every step of a sampled unroll counts, the zero padding after an episode's
    # end included (its last unroll is padded to T+1): the queue hands out each
    # unroll once, yet consumed/produced reads above 1 when episodes are short.
    frames = cfg.global_batch_size * cfg.unroll_length
    lags = [r["policy_lag_mean"] for r in lwin if isinstance(r.get("policy_lag_mean"), (int, float))]
    return {
        "method": ("run_on_ray(IMPALABuilder(IMPALAConfig()), 2 actors, local Ray, queue inside the "
                   "learner) as `rlplat train impala` runs it, learning on; steady env frames/s = "
                   "least-squares slope of actor steps over wall time of the actor records in "
                   f"metrics.jsonl from {args.steady_from:.0%} of max_actor_steps on (Ray start, imports, "
                   "tracing excluded). Learner frames/s = its steps/s slope x global_batch_size x "
                   "unroll_length over the same window. CPU per role sampled from /proc."),
        "max_actor_steps": args.max_actor_steps,
        "steady_window": {"from_actor_step": window[0]["step"], "to_actor_step": window[-1]["step"],
                          "seconds": round(t1 - t0, 1), "actor_records": len(window)},
        "env_frames_per_s": env_rate,
        "learner_steps_per_s": learn_rate,
        "learner_frames_per_s": learn_rate * frames if learn_rate else None,
        "consumed_over_produced": (learn_rate * frames / env_rate) if env_rate and learn_rate else None,
        "policy_lag_mean_in_window": _median(lags),
        "cpu_in_window": sampler.between(t0, t1),
        "learner_process_cores_by_thread": sampler.learner_threads_between(t0, t1),
        "summary": {k: v for k, v in summary.items() if isinstance(v, (int, float, str, type(None)))},
        "total_wall_seconds": round(wall, 1),
        "logdir": logdir,
    }


# ------------------------------------------------------------------- report
def _where_time_goes(report):
    where = {}
    sy = report.get("system")
    if sy and (sy["env_frames_per_s"] or 0) < SYSTEM_TARGET_FRAMES_PER_S:
        cpu = (sy.get("cpu_in_window") or {}).get("cores_by_role", {})
        text = (f"pipeline {sy['env_frames_per_s']:.0f} env frames/s < {SYSTEM_TARGET_FRAMES_PER_S:.0f}; "
                f"learner consumes {sy['learner_frames_per_s'] or float('nan'):.0f} frames/s in it. CPU "
                "cores by role in the window: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
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
    print(f"\n== IMPALA throughput ({report['env']}, {report['cpus']} CPUs, load "
          f"{report['load_average']['start']}) ==")
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
            print("   cores by role in the window: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()))
        threads = sy.get("learner_process_cores_by_thread")
        if threads:
            print("   learner process, cores by thread: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in list(threads.items())[:8]))
    for key, text in report.get("where_time_goes", {}).items():
        print(f"where the time goes ({key}): {text}")
    print(f"load average at the end {report['load_average'].get('end')}; total {report['seconds']['total']:.0f} s")


def _plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ((ax_a, ax_bd), (ax_ln, ax_sys)) = plt.subplots(2, 2, figsize=(13, 9))
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
        labels = [f"{k} actor{'s' if k != '1' else ''}" for k in keys] + ["raw env"]
        bottom = [0.0] * len(labels)
        colors = plt.get_cmap("tab10").colors
        for i, part in enumerate(accounting.PARTS):
            values = [res[k]["per_step_us"][part] for k in keys] + [0.0]
            if part == "env":
                values[-1] = res[keys[0]]["raw_env_cpu_us_per_frame"]
            ax_bd.bar(labels, values, bottom=bottom, label=accounting.PART_LABELS[part],
                      color=colors[i % 10])
            bottom = [b + v for b, v in zip(bottom, values)]
        for xi, total in enumerate(bottom):
            ax_bd.text(xi, total, f"{total:.0f}", ha="center", va="bottom", fontsize=8)
        ax_bd.set_ylim(0, 1.6 * max(bottom))
        ax_bd.set_ylabel("CPU us per env frame")
        ax_bd.set_title("Where an actor frame's CPU goes", fontsize=10)
        ax_bd.legend(fontsize=7, loc="upper right")
    ln = report.get("learner")
    if ln:
        bars = ax_ln.bar(["from the Reverb queue\n(input_fn)", "from memory\n(one batch)"],
                         [ln["queue_frames_per_s"], ln["memory_frames_per_s"]], color=["tab:orange", "tab:gray"])
        ax_ln.bar_label(bars, fmt="%.0f")
        ax_ln.set_ylim(0, 1.25 * max(ln["queue_frames_per_s"], ln["memory_frames_per_s"]))
        ax_ln.set_ylabel("learner frames / s (unrolls x T)")
        ax_ln.set_title(f"Learner alone: ratio {ln['ratio']:.3f}; batch {ln['global_batch_size']} x T "
                        f"{ln['unroll_length']}, TF threads {ln['threads_intra_inter'][0]}/"
                        f"{ln['threads_intra_inter'][1]}", fontsize=10)
    sy = report.get("system")
    if sy:
        bars = ax_sys.bar(["env frames/s\n(2 actors, learning on)", "learner frames/s\nin the pipeline"],
                          [sy["env_frames_per_s"] or 0, sy["learner_frames_per_s"] or 0],
                          color=["tab:purple", "tab:orange"])
        ax_sys.bar_label(bars, fmt="%.0f")
        ax_sys.axhline(SYSTEM_TARGET_FRAMES_PER_S, color="tab:green", ls="--", lw=1, label="target 5,000")
        ax_sys.set_ylim(0, 1.3 * max(sy["env_frames_per_s"] or 0, SYSTEM_TARGET_FRAMES_PER_S))
        ax_sys.set_ylabel("frames / s (steady window)")
        cpu = (sy.get("cpu_in_window") or {}).get("cores_by_role")
        title = "System: run_on_ray, 2 actors"
        if cpu:
            title += "\ncores: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items() if v >= 0.02)
        ax_sys.set_title(title, fontsize=9)
        ax_sys.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"IMPALA throughput, {report['env']}, {report['cpus']} CPUs (load {report['load_average']['start']})",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="gym:CartPole-v1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--actor-rounds", type=int, default=5)
    parser.add_argument("--actor-chunks", type=int, default=15, help="run_steps chunks per actor window")
    parser.add_argument("--raw-steps", type=int, default=30_000, help="random-action steps per raw block")
    parser.add_argument("--learner-rounds", type=int, default=8)
    parser.add_argument("--learner-block-steps", type=int, default=200)
    parser.add_argument("--max-actor-steps", type=int, default=600_000)
    parser.add_argument("--steady-from", type=float, default=0.25,
                        help="fraction of max_actor_steps before which the system run is warm-up")
    parser.add_argument("--parts", default="actor,learner,system")
    parser.add_argument("--envs-per-actor", type=int, default=1,
                        help="environments per actor process in the actor part (--envs-per-actor)")
    parser.add_argument("--name", default="impala_throughput", help="output file stem")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--learner-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--learner-threads", default="1,2", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.learner_child:
        return learner_child(args)
    parts = set(args.parts.split(","))
    unknown = parts - {"actor", "learner", "system"}
    if unknown:
        raise SystemExit(f"unknown --parts {sorted(unknown)}; use a comma list of actor,learner,system")

    started = time.time()

    def log(msg):
        print(f"[{time.time() - started:6.1f}s] {msg}", flush=True)

    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig
    from rlplat_envs import make_environment
    from rlplat import specs

    builder = IMPALABuilder(config=IMPALAConfig())
    with make_environment(args.env, seed=args.seed) as env:
        spec = specs.make_environment_spec(env)
    report = {
        "benchmark": "impala_throughput",
        "env": args.env,
        "command": "python " + " ".join([os.path.relpath(os.path.abspath(__file__), _REPO)] + sys.argv[1:]),
        "cpus": os.cpu_count(),
        "machine": seeds_lib.machine(),  # the CPU model: figures depend on it
        "config": builder.config.to_dict(),
        "builder": {"steps_per_call": builder.steps_per_call, "replay_table": builder.replay_table},
        "targets": {"system_env_frames_per_s": SYSTEM_TARGET_FRAMES_PER_S},
        "load_average": {"start": _load()},
        "seconds": {},
    }
    for part, fn in (("actor", lambda: measure_actors(args, builder, spec, log)),
                     ("learner", lambda: measure_learner(args, log)),
                     ("system", lambda: measure_system(args, builder, log))):
        if part in parts:
            mark = time.time()
            report[part] = fn()
            report["seconds"][part] = round(time.time() - mark, 1)
            report["load_average"][f"after_{part}"] = _load()
    report["load_average"]["end"] = _load()
    report["seconds"]["total"] = round(time.time() - started, 1)
    if "system" in report:
        fps = report["system"]["env_frames_per_s"] or 0.0
        report["targets"]["system_met"] = fps >= SYSTEM_TARGET_FRAMES_PER_S
    report["where_time_goes"] = _where_time_goes(report)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(report, f, indent=2)
    _plot(report, os.path.join(args.out, f"{args.name}.png"))
    _print_summary(report)
    return report


if __name__ == "__main__":
    main()
