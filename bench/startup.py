"""Start-up of README command (a): seconds from launch to each milestone, beside what those seconds are made of.

1. **Milestones** (``--runs`` runs of ``rlplat train d4pg --env cartpole:swingup``,
   started as a user starts them, each stopped at 2,000 env steps): Ray up,
   replay ready, learner ready, first actor step and first learner step, read
   from each run's ``run_info.json`` (``startup_s``); the median of each. Beside
   them, the learner process's own path (``learner_startup_s``): when the
   driver asked Ray for it, when its process started, entered its
   constructor, had imported TensorFlow, served replay, had built the
   learner, and was ready.
2. **Parts** (``--repeats`` fresh processes each, the fastest): Python alone; each
   import the run's processes pay (Ray, TensorFlow, Reverb, dm_control with
   MuJoCo, rlplat's learner and actor modules); a local Ray started the way
   ``rlplat train`` starts it; the learner's build and first call alone
   (``bench/first_call.py``: the trace, with the seconds AutoGraph spent
   converting functions, then graph optimisation and the first run).

The report puts the first learner step beside two floors. **The learner's
path floor**: the steps the learner process takes one after another before
its first step can run (Ray's start up to the process, Ray's worker start
on its main thread, TensorFlow's import, the replay server and learner
build, the first step's trace, then the step's optimisation and run), each
at the CPU-seconds the runs' own learner spent on it
(``learner_startup_cpu_s`` in run_info.json; for the first run, the wall
time from the trace's end to the first step), or at the part's time alone
where that is less. No overlap of the other workers can bring the first
step under it. **The CPU floor**: the CPU seconds every process of the run
(driver, Ray's services, learner, actors) had used by its first learner
step, sampled from /proc, over the machine's cores, which no schedule can
go under either. The machine's load average is recorded with each figure:
run it on a quiet machine.

``--baseline DIR`` (a checkout of another commit, e.g. ``git worktree add
DIR REV``) runs that tree's code as well, alternating with this one's (A B,
then B A), and reports its milestones beside these and the per-pair
differences of the first learner step: a before/after on the same machine
at the same time.

    python bench/startup.py [--runs 3] [--repeats 3] [--baseline DIR]
    python bench/startup.py --report-only   # the report again, from results/startup.json
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
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import cli_runs  # noqa: E402
import cpu_accounting  # noqa: E402
import throughput_report  # noqa: E402

MILESTONES = ("ray_up", "replay_ready", "learner_ready", "first_actor_step", "first_learner_step")
IMPORTS = {
    "python alone": "pass",
    "numpy": "import numpy",
    "ray": "import ray",
    "tensorflow": "import tensorflow",
    "tensorflow + reverb": "import tensorflow, reverb",
    "dm_control suite (MuJoCo)": "from dm_control import suite",
    "rlplat learner worker": "import rlplat.distributed.workers.learner",
    "rlplat actor worker": "import rlplat.distributed.workers.actor",
    "reverb's client without TensorFlow's API (actors)": "from rlplat.replay import reverb_client",
}
RAY_UP = ("import time; t = time.perf_counter(); from rlplat.distributed import cluster; "
          "c = cluster.connect(None); print(time.perf_counter() - t); cluster.disconnect(c)")


def _seconds(code: str) -> float:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", MUJOCO_GL=os.environ.get("MUJOCO_GL", "osmesa"))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True, timeout=300)
    return time.perf_counter() - start


def measure_parts(repeats: int, log) -> Dict[str, float]:
    """The fastest of ``repeats`` wall seconds of each import in a fresh process, less Python's own start;
    Ray's start; the learner's build and first call.

    The fastest, not the median: these are the floor's parts, and a busy
    minute on the box only ever adds to them.
    """
    parts: Dict[str, float] = {}
    for name, code in IMPORTS.items():
        parts[name] = min(_seconds(code) for _ in range(repeats))
        log(f"{name}: {parts[name]:.2f} s")
    base = parts.pop("python alone")
    parts = {name: max(0.0, s - base) for name, s in parts.items()}
    parts["python alone"] = base
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    ray_up = []
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", RAY_UP], check=True, env=env, capture_output=True, text=True,
                              timeout=300)
        ray_up.append(float(done.stdout.strip().splitlines()[-1]))
    parts["local ray start (cluster.connect)"] = min(ray_up)
    log(f"local ray start: {parts['local ray start (cluster.connect)']:.2f} s")
    calls = [_first_call() for _ in range(repeats)]
    for key, name in FIRST_CALL_PARTS.items():
        parts[name] = min(c[key] for c in calls)
        log(f"{name}: {parts[name]:.2f} s")
    return parts


# bench/first_call.py's figures, under the names the parts are reported by.
FIRST_CALL_PARTS = {"build_s": "d4pg learner built (alone)",
                    "first_call_s": "d4pg learner's first call: trace, optimise, run (alone)",
                    "trace_s": "d4pg learner's trace (alone)",
                    "first_run_s": "d4pg learner's first run after its trace (alone)",
                    "autograph_s": "of which AutoGraph converting functions"}


def _first_call() -> Dict[str, float]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", MUJOCO_GL=os.environ.get("MUJOCO_GL", "osmesa"))
    done = subprocess.run([sys.executable, os.path.join(HERE, "first_call.py")], check=True, env=env,
                          capture_output=True, text=True, timeout=300)
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_env(tree: str) -> Dict[str, str]:
    """An environment whose ``rlplat``, ``rlplat_agents`` and ``rlplat_envs`` are ``tree``'s (PYTHONPATH first)."""
    links = tempfile.mkdtemp(prefix="startup_baseline_")
    os.symlink(os.path.join(tree, "agents"), os.path.join(links, "rlplat_agents"))
    os.symlink(os.path.join(tree, "envs"), os.path.join(links, "rlplat_envs"))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(tree), links]))


def measure_runs(runs: int, log, baseline: Optional[str] = None) -> List[Dict[str, Any]]:
    """``runs`` short runs of README command (a); each run's ``startup_s`` and env steps/s.

    With ``baseline`` (a tree), each of the ``runs`` rounds also runs that tree's
    code, this tree first in even rounds and second in odd ones; each record
    names its ``tree`` ("this" or "baseline") and ``round``.
    """
    out = []
    trees = [("this", None)] if baseline is None else [("this", None), ("baseline", baseline_env(baseline))]
    for i in range(runs):
        for tree, env in (trees if i % 2 == 0 else trees[::-1]):
            out.append(dict(_one_run(i, log, env), tree=tree, round=i))
    return out


def _one_run(i: int, log, env: Optional[Dict[str, str]]) -> Dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="startup_")
    logdir = os.path.join(folder, "run")
    sampler = cpu_accounting.DescendantCpuSampler().start()
    launched = time.time()
    try:
        seconds = cli_runs.run(["train", "d4pg", "--env", "cartpole:swingup", "--max-actor-steps", "2000",
                            "--eval-every-steps", "2000", "--eval-episodes", "1", "--seed", str(100 + i),
                                "--logdir", logdir], os.path.join(folder, "console.log"), bench="startup",
                               env=env, cwd=folder)  # Ray puts the driver's directory first on its workers' path
    finally:
        sampler.stop()
    with open(os.path.join(logdir, "run_info.json"), encoding="utf-8") as f:
        info = json.load(f)
    log(f"run {i}{' (baseline)' if env else ''}: "
        + ", ".join(f"{k} {v:.1f}" for k, v in info["startup_s"].items()))
    cpu = sampler.by_role_at(launched + info["startup_s"]["first_learner_step"])
    log(f"run {i}: CPU-s of all its processes to the first learner step {sum(cpu.values()):.1f} ("
        + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()) + ")")
    return {"startup_s": info["startup_s"], "learner_startup_s": info.get("learner_startup_s"),
            "learner_startup_cpu_s": info.get("learner_startup_cpu_s"),
            "cpu_to_first_learner_step_s": cpu,
            "wall_s": seconds, "git_sha": info.get("git_sha"), "load_average": os.getloadavg()[0]}


def _milestones(runs: List[Dict[str, Any]]) -> Dict[str, float]:
    return {m: statistics.median(r["startup_s"][m] for r in runs if m in r["startup_s"]) for m in MILESTONES}


def baseline_report(runs: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The baseline tree's median milestones and, per round, its first learner step less this tree's."""
    base = [r for r in runs if r.get("tree") == "baseline"]
    if not base:
        return None
    this = {r["round"]: r for r in runs if r.get("tree") == "this"}
    gaps = [b["startup_s"]["first_learner_step"] - this[b["round"]]["startup_s"]["first_learner_step"]
            for b in base if b["round"] in this]
    return {"git_sha": base[0].get("git_sha"), "milestones_s": _milestones(base),
            "first_learner_step_gaps_s": gaps, "rounds_this_faster": sum(g > 0 for g in gaps)}


# The learner's path to its first step, as the runs met it: what each step cost the thread that did it
# (``learner_startup_cpu_s``), or the same step alone in a fresh process where that was less.
PATH_STEPS = (("boot", "Ray worker start", None),
              ("tensorflow_import", "TensorFlow import", "tensorflow + reverb"),
              ("build", "replay server and learner build", "d4pg learner built (alone)"),
              ("first_step_trace", "first step's trace", "d4pg learner's trace (alone)"))
FIRST_RUN = "first step's graph optimisation and run"


def path_floor(parts: Dict[str, float], runs: List[Dict[str, Any]]) -> Optional[Dict[str, float]]:
    """The learner's path to its first step with nothing else on the machine, from the runs' own records.

    The launch to the learner's process starting (Ray's start, median); then
    each step's CPU-seconds in the runs (median), or the part measured alone
    where that is less; then the first step's run after its trace: alone, or
    the runs' median gap from the trace's end to the first step's where that
    is less.
    The steps follow one another in one process, so no schedule of the other
    workers can bring the first learner step under their sum. None without
    runs that recorded their CPU-seconds.
    """
    recorded = [r for r in runs if r.get("learner_startup_cpu_s") and r.get("learner_startup_s")]
    if not recorded:
        return None
    floor = {"launch to the learner's process (Ray's start)":
             statistics.median(r["learner_startup_s"]["process_started"] for r in recorded)}
    for key, name, alone in PATH_STEPS:
        in_runs = statistics.median(r["learner_startup_cpu_s"][key] for r in recorded
                                    if key in r["learner_startup_cpu_s"])
        floor[name] = min(in_runs, parts.get(alone, in_runs)) if alone else in_runs
    # The first run's CPU is not recorded; in the runs it took at most the gap from the trace's end to
    # the first step's (which may include waiting for data), alone it took the part's time.
    gaps = [r["startup_s"]["first_learner_step"] - r["learner_startup_s"]["first_step_traced"] for r in recorded
            if "first_step_traced" in r["learner_startup_s"] and "first_learner_step" in r["startup_s"]]
    alone = parts.get(FIRST_CALL_PARTS["first_run_s"])
    floor[FIRST_RUN] = min([x for x in (alone, statistics.median(gaps) if gaps else None) if x is not None],
                           default=0.0)
    return floor


def report(parts: Dict[str, float], runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Median milestones; the learner's path floor (``path_floor``) and the CPU floor beside them."""
    baseline = baseline_report(runs)
    runs = [r for r in runs if r.get("tree", "this") == "this"]
    milestones = _milestones(runs)
    floor = path_floor(parts, runs)
    steps = [r["learner_startup_s"] for r in runs if r.get("learner_startup_s")]
    # The learner process's own path to "ready", step by step (median seconds from launch).
    learner_path = ({k: statistics.median(s[k] for s in steps if k in s) for k in steps[0]} if steps else None)
    cpu = [r["cpu_to_first_learner_step_s"] for r in runs if r.get("cpu_to_first_learner_step_s")]
    cpu_by_role = ({role: statistics.median(c.get(role, 0.0) for c in cpu) for role in {k for c in cpu for k in c}}
                   if cpu else None)
    cpu_total = statistics.median(sum(c.values()) for c in cpu) if cpu else None
    cores = os.cpu_count() or 1
    floor_total = None if floor is None else sum(floor.values())
    return {"milestones_s": milestones, "learner_path_s": learner_path, "parts_s": parts, "floor_s": floor,
            "floor_total_s": floor_total,
            # Every process's CPU to the first learner step, spread over every core: no schedule goes under it.
            "cpu_to_first_learner_step_s": cpu_by_role, "cpu_total_s": cpu_total,
            "cpu_floor_s": None if cpu_total is None else cpu_total / cores, "cores": cores,
            "first_learner_step_over_floor": (None if floor_total is None
                                              else milestones["first_learner_step"] / floor_total),
            "target_first_learner_step_s": 8.0, **({"baseline": baseline} if baseline else {})}


def plot(result: Dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.2))
    left = 0.0
    for name, seconds in (result["floor_s"] or {}).items():
        ax.barh(["learner's path floor"], [seconds], left=[left], label=name)
        left += seconds
    rows = [("measured milestones", result["milestones_s"])]
    if result.get("baseline"):
        sha = (result["baseline"]["git_sha"] or "")[:7]
        rows.insert(0, (f"baseline {sha}".strip(), result["baseline"]["milestones_s"]))
    for row, (label, ms) in enumerate(rows, start=1):
        ax.barh([label], [ms["first_learner_step"]], color="lightgray")
        for m in MILESTONES:
            ax.plot([ms[m]], [label], "k|", markersize=18)
            if row == len(rows):
                ax.annotate(m.replace("_", " "), (ms[m], row), xytext=(0, 14), textcoords="offset points",
                            rotation=35, fontsize=7)
    ax.axvline(result["target_first_learner_step_s"], color="r", ls="--", label="issue 31's target (8 s)")
    if result.get("cpu_floor_s") is not None:
        ax.axvline(result["cpu_floor_s"], color="k", ls=":", label="CPU floor (every process's CPU over the cores)")
    ax.set_xlabel("seconds from launch")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.45, -0.2), ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    from seeds import machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", metavar="DIR", help="a checkout of another commit to run alternately")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--report-only", action="store_true",
                        help="measure nothing: rebuild the report from the parts and runs in OUT/startup.json")
    args = parser.parse_args(argv)
    if args.baseline and not os.path.isdir(os.path.join(args.baseline, "rlplat")):
        parser.error(f"--baseline {args.baseline}: not a checkout of rlplat (no rlplat/ in it)")
    log = throughput_report.logger(time.time())

    if args.report_only:
        with open(os.path.join(args.out, "startup.json"), encoding="utf-8") as f:
            kept = json.load(f)
        machine_info, load_before, parts, runs = (kept["machine"], kept["load_average_before"], kept["parts_s"],
                                                  kept["runs"])
    else:
        machine_info, load_before = machine(), os.getloadavg()[0]
        parts = measure_parts(args.repeats, log)
        runs = measure_runs(args.runs, log, args.baseline)
    result = {"benchmark": "startup", "machine": machine_info, "load_average_before": load_before, "runs": runs,
              **report(parts, runs)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "startup.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, "startup.png"))
    log("milestones (median): " + ", ".join(f"{k} {v:.1f} s" for k, v in result["milestones_s"].items()))
    if result["learner_path_s"]:
        log("learner's path (median s from launch): "
            + ", ".join(f"{k} {v:.1f}" for k, v in result["learner_path_s"].items()))
    if result["floor_s"]:
        log(f"learner's path floor: {result['floor_total_s']:.1f} s = "
            + " + ".join(f"{k} {v:.2f}" for k, v in result["floor_s"].items()))
    if result["cpu_total_s"] is not None:
        log(f"CPU floor: {result['cpu_floor_s']:.1f} s = {result['cpu_total_s']:.1f} CPU-s of every process to the "
            f"first learner step over {result['cores']} cores ("
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(result["cpu_to_first_learner_step_s"].items(),
                                                          key=lambda kv: -kv[1])) + ")")
    if result.get("baseline"):
        base = result["baseline"]
        log(f"baseline {base['git_sha']}: " + ", ".join(f"{k} {v:.1f} s" for k, v in base["milestones_s"].items())
            + f"; first learner step later than this tree's in {base['rounds_this_faster']} of "
            f"{len(base['first_learner_step_gaps_s'])} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
