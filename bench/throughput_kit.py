"""What the throughput benches measure alike: Ray-side workers, actor rounds, learner blocks, the system run.

``d4pg_throughput.py`` and ``impala_throughput.py`` measure the same three
things for their agent on one machine: real actors against raw stepping
(part 1), the learner fed from replay against fed from memory (part 2), and
the whole ``run_on_ray`` pipeline (part 3). What does not depend on the agent
is here:

- ``ray_classes``: the Ray-side actor that times itself, the raw stepper, and
  the base of each bench's stand-in learner (ever-newer weights);
- ``run_actor_rounds`` / ``actor_results`` / ``per_round``: part 1's rounds,
  each a window of actor chunks between two raw blocks, reduced to medians;
  each bench names the figures in its own unit (steps, frames);
- ``timed_block``, ``run_child``, ``per_step_figures``: part 2's learner blocks
  and the child processes that run them;
- ``run_system``: part 3's run and its steady window.

Their command lines, the report's frame, JSON and PNG are in
``throughput_report.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from bench import cpu_accounting as accounting
from bench import seeds as seeds_lib

# Part 1 measures 1 to NUM_ACTORS actors; part 3's pipeline runs NUM_ACTORS.
NUM_ACTORS = 2


# ------------------------------------------------------- 1. actors (Ray side)
def ray_classes(stand_in: Callable[[type], type]):
    """``(StandInLearner, TimedActorWorker, RawStepper)``; ``stand_in(StandInBase)`` makes the bench's stand-in.

    Defined in a function so importing this module stays light (no Ray, TF).
    Local classes travel to Ray workers by value, so workers need not find
    bench/ on their path (``run_actor_rounds`` ships ``cpu_accounting`` too).
    """
    import numpy as np  # pylint: disable=g-import-not-at-top

    from rlplat.distributed import process, workers  # pylint: disable=g-import-not-at-top
    from rlplat.distributed.learner_service import WeightServer  # pylint: disable=g-import-not-at-top

    class StandInBase(WeightServer):
        """What actors see of a learner: the replay address and ever-newer policy weights.

        Every pull is answered with a newer version (a learner is always
        ahead of its actors), so every pull moves the whole policy. A
        subclass's ``_start`` builds the replay server and the weights and
        hands them to ``_serve``.
        """

        def __init__(self, builder, environment_spec, num_actors):
            process.setup_worker(1, 1, hide_gpus=True)
            self._start(builder, environment_spec, num_actors)

        def _start(self, builder, environment_spec, num_actors):
            raise NotImplementedError

        def _serve(self, server, weights):
            import reverb  # pylint: disable=g-import-not-at-top

            self._server = server
            self._address = f"127.0.0.1:{server.port}"
            self._client = reverb.Client(self._address)
            self._weights = weights
            self._version, self._pulls = 0, 0

        def _items(self):
            return int(sum(t.current_size for t in self._client.server_info().values()))

        def replay_address(self):
            return self._address

        def get_variables(self, names):
            return self._version, {name: self._weights for name in names}

        def get_variables_if_newer(self, names, version):
            self._version = max(self._version, int(version)) + 1
            self._pulls += 1
            return self.get_variables(names)

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
                    "threads": accounting.thread_cpu_table(), "pid": os.getpid(), "time": time.perf_counter()}

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
            low = np.broadcast_to(self._spec.minimum, self._spec.shape).astype(np.float32)
            high = np.broadcast_to(self._spec.maximum, self._spec.shape).astype(np.float32)
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

    return stand_in(StandInBase), TimedActorWorker, RawStepper


# ----------------------------------------------------- 1. actors (driver side)
@dataclasses.dataclass
class ActorRounds:
    """Part 1's raw material: per actor count, one record a round; what the stand-in served."""

    rounds: Dict[int, List[Dict[str, Any]]]
    stand_in_stats: Dict[str, Any]
    chunk_steps: int


def _round(before, windows, after) -> Dict[str, Any]:
    """One round's figures, in neutral names (``actor_results`` and ``per_round`` rename them)."""
    raw = before + after
    raw_rate = accounting.steps_per_cpu_s(raw)
    rates = [w["steps"] / w["process_cpu_s"] for w in windows]
    return {
        "raw_rate": raw_rate, "raw": raw,
        "raw_before_after": [round(accounting.steps_per_cpu_s(half), 1) for half in (before, after)],
        "raw_wall_rate": statistics.mean(
            sum(x["steps"] for x in half) / max(x["wall_s"] for x in half) for half in (before, after)),
        "actor_rates": rates,
        "efficiency": statistics.mean(rates) / raw_rate,
        "wall_rate": sum(w["steps"] for w in windows) / max(w["window_wall_s"] for w in windows),
        "windows": windows,
    }


def run_actor_rounds(args, builder, spec, classes, *, name: str, warmup_chunks: int, warmup_raw_steps: int,
                     up_text: str, round_text: Callable[[Dict[int, List[Dict[str, Any]]]], str],
                     log: Callable[[str], None]) -> ActorRounds:
    """Part 1 on a local Ray: ``args.actor_rounds`` rounds of 1 then 2 actors, each between raw blocks.

    ``classes`` is the bench's ``(StandInLearner, TimedActorWorker,
    RawStepper)``. Actors are driven in ``run_steps`` chunks with one call in
    flight each, as the layout's driver does; raw steppers run in as many
    processes with the same Ray settings. Ray is shut down at the end: part
    3's ``run_on_ray`` starts its own, as ``rlplat train`` does.
    """
    import ray  # pylint: disable=g-import-not-at-top

    from rlplat import seeding  # pylint: disable=g-import-not-at-top
    from rlplat.distributed import cluster, process, workers  # pylint: disable=g-import-not-at-top
    from rlplat.runners import EnvironmentFactory, RayLayoutConfig  # pylint: disable=g-import-not-at-top

    ray.cloudpickle.register_pickle_by_value(accounting)  # the Ray-side classes call it
    chunk_steps = RayLayoutConfig().actor_chunk_steps
    conn = cluster.connect(None)
    stand_in_cls, actor_cls, raw_cls = classes
    learner = workers.remote(stand_in_cls, num_cpus=0, max_concurrency=4, name=name,
                             runtime_env=process.runtime_env("learner")).remote(builder, spec, NUM_ACTORS)
    actor_cls = workers.remote(actor_cls, num_cpus=0, max_restarts=0, runtime_env=process.runtime_env("actor"))
    raw_cls = workers.remote(raw_cls, num_cpus=0, runtime_env=process.runtime_env("actor"))
    actors = [actor_cls.remote(builder, EnvironmentFactory(args.env), i, seeding.actor_seed(args.seed, i), name, None,
                               envs_per_actor=args.envs_per_actor)
              for i in range(NUM_ACTORS)]
    raws = [raw_cls.remote(args.env, seeding.actor_seed(args.seed, 100 + i)) for i in range(NUM_ACTORS)]
    ray.get(learner.replay_address.remote(), timeout=300)
    ray.get([a.info.remote() for a in actors], timeout=300)
    # Warm-up: the adder's writer, the first pulls, the stand-in's replay, NumPy/env caches.
    ray.get([a.run_steps.remote(chunk_steps) for a in actors for _ in range(warmup_chunks)]
            + [r.run.remote(warmup_raw_steps) for r in raws], timeout=300)
    log(f"{up_text}; {args.actor_rounds} rounds")

    rounds: Dict[int, List[Dict[str, Any]]] = {k: [] for k in range(1, NUM_ACTORS + 1)}
    for r in range(args.actor_rounds):
        for k in rounds:
            rounds[k].append(_round(*accounting.window_between_raw_blocks(
                ray, actors[:k], raws, chunk_steps, args.actor_chunks, args.raw_steps)))
        log(f"  round {r + 1}: {round_text(rounds)}")
    stats = ray.get(learner.stats.remote(), timeout=60)
    for handle in actors + raws + [learner]:
        ray.kill(handle, no_restart=True)
    cluster.disconnect(conn)
    return ActorRounds(rounds, stats, chunk_steps)


def actor_results(rounds: Dict[int, List[Dict[str, Any]]], names: Dict[str, str]) -> Dict[str, Dict[str, Any]]:
    """Per actor count: medians over rounds under the bench's ``names``, and the CPU breakdown per step.

    ``names`` maps the neutral figures (efficiency, efficiency_per_round,
    actor_rate, raw_rate, raw_cpu_us, raw_background_us, wall_rate,
    raw_wall_rate) to the bench's keys, in the order they appear.
    """
    results = {}
    for k, rs in rounds.items():
        raw_rate = accounting.median([x["raw_rate"] for x in rs])
        raw_items = [item for x in rs for item in x["raw"]]
        raw_bg_cpu = sum(max(0.0, item["cpu_s"] - item["main_thread_cpu_s"]) for item in raw_items)
        figures = {
            "efficiency": accounting.median([x["efficiency"] for x in rs]),
            "efficiency_per_round": [round(x["efficiency"], 4) for x in rs],
            "actor_rate": accounting.median([statistics.mean(x["actor_rates"]) for x in rs]),
            "raw_rate": raw_rate,
            "raw_cpu_us": 1e6 / raw_rate,
            # Background threads of a Ray process that steps the env but has no Reverb
            # writer: what Ray's own threads cost while the main thread is busy.
            "raw_background_us": round(1e6 * raw_bg_cpu / sum(item["steps"] for item in raw_items), 2),
            "wall_rate": accounting.median([x["wall_rate"] for x in rs]),
            "raw_wall_rate": accounting.median([x["raw_wall_rate"] for x in rs]),
        }
        results[str(k)] = {"num_actors": k, **{key: figures[neutral] for neutral, key in names.items()},
                           **accounting.breakdown_us([w for x in rs for w in x["windows"]])}
    return results


def per_round(rounds: Dict[int, List[Dict[str, Any]]], names: Dict[str, str]) -> Dict[str, List[Dict[str, Any]]]:
    """Each round's figures under the bench's ``names`` (neutral name -> key; windows and raw blocks left out)."""
    return {str(k): [{key: x[neutral] for neutral, key in names.items()} for x in rs] for k, rs in rounds.items()}


# ----------------------------------------------------------------- 2. learner
def learner_child_threads(args) -> Tuple[int, ...]:
    """In a learner child: the layout's TF threads from ``--learner-threads``, applied as a learner worker does."""
    from rlplat.distributed import process  # pylint: disable=g-import-not-at-top

    threads = tuple(int(x) for x in args.learner_threads.split(","))
    process.setup_worker(threads[0], threads[1], hide_gpus=True, num_cpu_replicas=1)
    return threads


def timed_block(learner, steps: int) -> Dict[str, float]:
    """At least ``steps`` learner steps (whole calls); the steps run, wall and process CPU seconds."""
    n0 = learner.num_steps
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while learner.num_steps - n0 < steps:
        learner.step()
    return {"steps": learner.num_steps - n0, "wall_s": time.perf_counter() - wall0,
            "cpu_s": time.process_time() - cpu0}


def run_child(command: Callable[[str], List[str]], env: Dict[str, str], timeout: Optional[float] = None) -> Any:
    """Runs ``command(path)`` (a learner child writing its JSON to ``path``) and returns what it wrote."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        subprocess.run(command(path), env=env, check=True, timeout=timeout)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def per_step_figures(blocks: Dict[str, Sequence[Dict[str, float]]]) -> Dict[str, Optional[float]]:
    """``<kind>_cpu_ms_per_step``, ``<kind>_wall_ms_per_step`` and ``<kind>_cores_used`` (medians of blocks)."""
    out = {}
    for key, per_block in (("cpu_ms_per_step", lambda b: 1e3 * b["cpu_s"] / b["steps"]),
                           ("wall_ms_per_step", lambda b: 1e3 * b["wall_s"] / b["steps"]),
                           # Cores the learner process keeps busy (process CPU / wall).
                           ("cores_used", lambda b: b["cpu_s"] / b["wall_s"])):
        for kind, kind_blocks in blocks.items():
            out[f"{kind}_{key}"] = accounting.median([per_block(b) for b in kind_blocks])
    return out


# ------------------------------------------------------------------ 3. system
@dataclasses.dataclass
class SystemRun:
    """A finished ``run_on_ray`` and its steady window (actor records from ``--steady-from`` on)."""

    logdir: str
    summary: Dict[str, Any]
    wall_s: float
    sampler: Any
    actor_window: List[Dict[str, Any]]
    learner_window: List[Dict[str, Any]]
    env_rate: Optional[float]
    learn_rate: Optional[float]

    @property
    def t0(self) -> float:
        return self.actor_window[0]["wall_time"]

    @property
    def t1(self) -> float:
        return self.actor_window[-1]["wall_time"]

    def steady_window(self) -> Dict[str, Any]:
        return {"from_actor_step": self.actor_window[0]["step"], "to_actor_step": self.actor_window[-1]["step"],
                "seconds": round(self.t1 - self.t0, 1), "actor_records": len(self.actor_window)}

    def cpu_in_window(self) -> Optional[Dict[str, Any]]:
        return self.sampler.between(self.t0, self.t1)

    def tail(self) -> Dict[str, Any]:
        """The report's last keys: the run's own summary, its wall time and logdir."""
        return {"summary": seeds_lib.scalar_summary(self.summary), "total_wall_seconds": round(self.wall_s, 1),
                "logdir": self.logdir}


def run_system(args, builder, log: Callable[[str], None], *, prefix: str, evaluations: str,
               sampler: Optional[accounting.CpuSampler] = None) -> SystemRun:
    """Part 3: ``run_on_ray`` with 2 actors as ``rlplat train`` runs it, CPU per role sampled from /proc.

    Env steps/s and learner steps/s are least-squares slopes over the actor
    records from ``args.steady_from`` of ``max_actor_steps`` on, so Ray's
    start, imports, tracing and the replay fill stay out.
    """
    from rlplat.runners import Experiment, RayLayoutConfig, run_on_ray  # pylint: disable=g-import-not-at-top

    logdir = tempfile.mkdtemp(prefix=prefix)
    log(f"run_on_ray: {NUM_ACTORS} actors, {args.max_actor_steps:,} actor steps, {evaluations}, logdir {logdir}")
    sampler = (sampler or accounting.CpuSampler()).start()
    started = time.time()
    try:
        experiment = Experiment(builder, args.env, num_actors=NUM_ACTORS, max_actor_steps=args.max_actor_steps,
                                logdir=logdir, seed=args.seed, eval_every_actor_steps=0, checkpoint_every_s=3600.0)
        summary = run_on_ray(experiment, RayLayoutConfig(console=False))
    finally:
        sampler.stop()
    wall = time.time() - started
    records = seeds_lib.read_metrics(logdir)
    first_step = args.steady_from * args.max_actor_steps
    window = [r for r in records if r.get("role") == "actor" and first_step <= r["step"] <= args.max_actor_steps]
    t0, t1 = window[0]["wall_time"], window[-1]["wall_time"]
    learner = [r for r in records if r.get("role") == "learner" and t0 <= r["wall_time"] <= t1]
    return SystemRun(logdir, summary, wall, sampler, window, learner,
                     accounting.slope([(r["wall_time"], r["step"]) for r in window]),
                     accounting.slope([(r["wall_time"], r["step"]) for r in learner]))
