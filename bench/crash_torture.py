"""Crash torture: SIGKILL a D4PG run at random moments, many times, and resume it each time; nothing may be lost.

One run of ``rlplat train d4pg`` (with ``--replay-checkpoint`` and a short
``--checkpoint-period``, so saves are frequent) is killed ``--kills`` times
with SIGKILL: the driver, the learner process or the whole process tree, at
random, and every other kill waits until a checkpoint or replay save is in
progress (its temporary files are on disk). After each kill, once every
process of the run is gone, the run directory is checked, and the run is
resumed with ``rlplat train d4pg --resume --logdir RUN`` and the run's task and
network flags, but not its budget, which the resume keeps from config.json. It passes when

- every resume starts: no life ends on its own with an error (a life killed
  before its first learner step, when start-up is slower than
  ``--start-timeout`` s, counts as a kill like any other);
- the counters never go backwards: the newest checkpoint's (learner step,
  actor steps) never decreases from one kill to the next;
- no checkpoint that the state file names is damaged (``run_dir.damaged_steps``),
  and TensorFlow restores the newest one (the next resume does);
- the run reaches its budget, and its final greedy evaluation is within the
  spread of uninterrupted runs of the same seed (``--reference-seeds``).

    python bench/crash_torture.py [--kills 50] [--max-actor-steps 300000] [--out DIR]

Writes crash_torture.json (every kill: target, moment, during a save or not,
restored step, counters, damage) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import seeds as seeds_lib  # noqa: E402

BENCH = "crash_torture"
RLPLAT = os.path.join(os.path.dirname(sys.executable), "rlplat")
TARGETS = ("driver", "learner", "tree")
# Small enough that a life trains for seconds, large enough to learn cartpole:balance.
RUN_FLAGS = ["--env", "cartpole:balance", "--num-actors", "1", "--replay-checkpoint",
             "--checkpoint-period", "2", "--eval-every-steps", "5000", "--eval-episodes", "3",
             "--policy-layer-sizes", "64,64", "--critic-layer-sizes", "64,64",
             "--min-replay-size", "256", "--samples-per-insert", "8"]


def _command(*args: str) -> List[str]:
    base = [RLPLAT] if os.path.exists(RLPLAT) else [sys.executable, "-m", "rlplat.launch.cli"]
    return [*base, *args]


def _env() -> Dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return env


def saving_now(logdir: str) -> Optional[str]:
    """What a checkpoint or replay save is writing right now (a temporary file's name), or None."""
    from rlplat import run_dir  # pylint: disable=g-import-not-at-top

    try:
        for name in os.listdir(run_dir.checkpoints_dir(logdir)):
            if "_temp" in name or ".tmp" in name:
                return f"checkpoints/{name}"
    except OSError:
        pass
    scratch = os.path.join(run_dir.replay_checkpoints_dir(logdir), ".reverb")
    try:
        for entry in os.scandir(scratch):
            return f"replay_checkpoints/.reverb/{entry.name}"
    except OSError:
        pass
    return None


def _tree(pid: int) -> List[Any]:
    import psutil  # pylint: disable=g-import-not-at-top

    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _learner(pid: int) -> Optional[Any]:
    for proc in _tree(pid):
        try:
            if "LearnerWorker" in " ".join(proc.cmdline()):
                return proc
        except Exception:  # pylint: disable=broad-except  (gone meanwhile)
            continue
    return None


def _wait_gone(procs: List[Any], timeout_s: float) -> List[Any]:
    import psutil  # pylint: disable=g-import-not-at-top

    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return psutil.wait_procs(alive, timeout=10)[1]


def _trained_since(logdir: str, since: float) -> bool:
    """Whether a learner record was written after wall time ``since``.

    By time, not by count: a resume first drops the records past its
    checkpoint from metrics.jsonl, so the count can fall below what it was.
    """
    from rlplat import run_dir  # pylint: disable=g-import-not-at-top
    from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top

    records = loggers.read_jsonl(run_dir.metrics_path(logdir), "learner", warn=False)
    return any(float(r.get("wall_time", 0.0)) > since for r in records)


def _committed(logdir: str) -> Dict[str, Any]:
    """The newest checkpoint's step and the counters saved with it."""
    from rlplat import run_dir  # pylint: disable=g-import-not-at-top
    from rlplat.distributed import counters  # pylint: disable=g-import-not-at-top

    step = run_dir.latest_step(logdir)
    saved = counters.load_counters(logdir, step) if step is not None else {}
    return {"learner_step": step, "actor_steps": int(saved.get("actor_steps", 0)),
            "damaged": run_dir.damaged_steps(logdir)}


def one_life(logdir: str, first: bool, max_actor_steps: int, seed: int, target: Optional[str],
             during_save: bool, rng: random.Random, start_timeout_s: float, log) -> Dict[str, Any]:
    """Starts (or resumes) the run; kills ``target`` when due (None: let it finish)."""
    args = ["train", "d4pg", "--logdir", logdir]
    # A resume names the run's task and network again (the CLI checks them against
    # config.json) but not its budget, which it must keep from config.json.
    args += [*RUN_FLAGS, "--seed", str(seed)] + (["--max-actor-steps", str(max_actor_steps)] if first
                                                 else ["--resume"])
    life_began = time.time()
    started = time.monotonic()
    proc = subprocess.Popen(_command(*args), stdout=log, stderr=log, env=_env(), start_new_session=True)
    life: Dict[str, Any] = {"target": target, "during_save": False, "started": False}
    while time.monotonic() - started < start_timeout_s:  # the resume must start: a learner step
        if _trained_since(logdir, life_began) or proc.poll() is not None:
            break
        time.sleep(0.2)
    life["started"] = _trained_since(logdir, life_began)
    life["start_s"] = time.monotonic() - started
    if first:  # a run killed before its first checkpoint has nothing to resume: not a case
        from rlplat import run_dir  # pylint: disable=g-import-not-at-top

        while proc.poll() is None and run_dir.latest_step(logdir) is None:
            time.sleep(0.1)
    if target is None or proc.poll() is not None:
        life["exit_code"] = proc.wait(timeout=3600)
        return life
    # A resume slower than start_timeout_s is still killed, as planned: left
    # alone it would train to the budget and leave no kills for the others.
    deadline = time.monotonic() + rng.uniform(0.5, 6.0)
    save_deadline = time.monotonic() + 15.0
    while proc.poll() is None:
        marker = saving_now(logdir) if during_save else None
        if marker:
            life["during_save"], life["save_marker"] = True, marker
            break
        if not during_save and time.monotonic() >= deadline:
            break
        if during_save and time.monotonic() >= save_deadline:
            break
        time.sleep(0.002)
    procs = _tree(proc.pid)
    victim = {"driver": procs[:1], "tree": procs, "learner": [p for p in [_learner(proc.pid)] if p]}[target]
    for p in victim:
        try:
            p.send_signal(signal.SIGKILL)
        except Exception:  # pylint: disable=broad-except  (already gone)
            pass
    life["killed_at_s"] = time.monotonic() - started
    life["killed"] = [p.pid for p in victim]
    try:
        life["exit_code"] = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        life["exit_code"] = proc.wait()
    life["left_over"] = len(_wait_gone(procs, 30.0))
    return life


def final_eval(logdir: str, seed: int, episodes: int) -> float:
    out = subprocess.run(_command("eval", "--logdir", logdir, "--episodes", str(episodes), "--seed",
                                  str(seed)), capture_output=True, text=True, env=_env(), timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("mean return"):
            return float(line.split()[2])
    raise RuntimeError(f"rlplat eval failed: {out.stderr[-2000:]}")


def torture(kills: int, max_actor_steps: int, seed: int, workdir: str, rng_seed: int = 0,
            start_timeout_s: float = 180.0, targets: Optional[List[str]] = None) -> Dict[str, Any]:
    """Runs the kill/resume loop in ``workdir``; returns the record (``passed`` and why).

    ``targets`` names the victim of each kill in order; by default each is drawn at random.
    """
    from rlplat import run_dir  # pylint: disable=g-import-not-at-top

    rng = random.Random(rng_seed)
    logdir = os.path.join(workdir, "run")
    lives: List[Dict[str, Any]] = []
    problems: List[str] = []
    previous = {"learner_step": -1, "actor_steps": -1}
    with open(os.path.join(workdir, "runs.log"), "ab") as log:
        for index in range(kills + 1):
            last = index == kills
            target = None if last else (targets[index] if targets else rng.choice(TARGETS))
            life = one_life(logdir, index == 0, max_actor_steps, seed, target, during_save=index % 2 == 1,
                            rng=rng, start_timeout_s=start_timeout_s, log=log)
            if "killed" not in life and life.get("exit_code") != 0:  # it ended by itself, failing
                problems.append(f"life {index}: the run failed on its own (exit {life.get('exit_code')}"
                                f"{'' if life['started'] else ', before its first learner step'})")
            committed = _committed(logdir) if os.path.isdir(run_dir.checkpoints_dir(logdir)) else {}
            life.update(committed=committed)
            if committed.get("damaged"):
                problems.append(f"life {index}: damaged checkpoints named by the state file: {committed['damaged']}")
            if committed.get("learner_step") is not None:
                now = (committed["learner_step"], committed["actor_steps"])
                if now < (previous["learner_step"], previous["actor_steps"]):
                    problems.append(f"life {index}: counters went back from {previous} to {committed}")
                previous = {"learner_step": now[0], "actor_steps": now[1]}
            lives.append(life)
            print(f"[{BENCH}] life {index}: {target or 'finish'}"
                  + (" (during a save)" if life["during_save"] else "")
                  + f", committed step {committed.get('learner_step')}, actor steps "
                    f"{committed.get('actor_steps')}, exit {life.get('exit_code')}", flush=True)
    if lives[-1].get("exit_code") != 0:
        problems.append(f"the last life did not finish the run (exit {lives[-1].get('exit_code')})")
    done = sum("killed" in life for life in lives)
    if done < kills:  # a life that found the budget reached had nothing left to kill
        problems.append(f"only {done} of {kills} kills hit a live run (the budget of {max_actor_steps} actor "
                        "steps was reached first); raise --max-actor-steps")
    if previous["actor_steps"] < max_actor_steps:
        problems.append(f"the run stopped at {previous['actor_steps']} actor steps, short of {max_actor_steps}")
    return {"kills": kills, "kills_done": done, "lives": lives, "problems": problems, "logdir": logdir,
            "during_save": sum(life["during_save"] for life in lives),
            "by_target": {t: sum(life["target"] == t for life in lives) for t in TARGETS},
            "passed": not problems}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    # About 3-6k actor steps go by per life on 2 quiet cores: 50 lives need room.
    parser.add_argument("--max-actor-steps", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-timeout", type=float, default=300.0,
                        help="seconds a life may take to its first learner step before it is killed anyway")
    parser.add_argument("--reference-seeds", type=int, default=3,
                        help="uninterrupted runs of the same seed whose final evals give the spread")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix=f"{BENCH}_")
    started = time.time()
    record = torture(args.kills, args.max_actor_steps, args.seed, workdir, start_timeout_s=args.start_timeout)
    record["final_eval"] = final_eval(record["logdir"], 1000, args.eval_episodes)
    references = []
    for i in range(args.reference_seeds):  # the same run, never killed
        ref = os.path.join(workdir, f"reference{i}")
        with open(os.path.join(workdir, "runs.log"), "ab") as log:
            subprocess.run(_command("train", "d4pg", "--logdir", ref, *RUN_FLAGS, "--max-actor-steps",
                                    str(args.max_actor_steps), "--seed", str(args.seed)),
                           stdout=log, stderr=log, env=_env(), check=True)
        references.append(final_eval(ref, 1000, args.eval_episodes))
    record["reference_evals"] = references
    low = min(references) - 0.1 * abs(min(references))
    if record["final_eval"] < low:
        record["problems"].append(f"final eval {record['final_eval']:.1f} below the uninterrupted runs' "
                                  f"{references} (bar {low:.1f})")
        record["passed"] = False
    record.update(machine=seeds_lib.machine(), seconds=time.time() - started,
                  max_actor_steps=args.max_actor_steps, seed=args.seed)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{BENCH}.json"), "w") as f:
        json.dump(record, f, indent=1)
    print(f"[{BENCH}] {'PASS' if record['passed'] else 'FAIL'}: {args.kills} kills "
          f"({record['during_save']} during a save; {record['by_target']}), final eval "
          f"{record['final_eval']:.1f} vs uninterrupted {references}; problems: {record['problems']}")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if record["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
