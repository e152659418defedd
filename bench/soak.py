"""Soak: a long D4PG run, memory per role and tf.function retracing over time.

Runs the real CLI (`rlplat train d4pg`, local Ray, Reverb inside the learner,
2 actors) for ``--minutes``, and every ``--sample-every`` seconds records the
resident memory (RSS) of each role's process: the driver, the learner (with
its Reverb server), each actor, the evaluator, Ray's raylet and GCS. It also
reads the learner's ``tf_traces`` (traces of replicated steps in the learner
process, logged with its metrics). Then it stops the run with SIGINT, the way
a user would, and checks the final checkpoint was written.

Verdict, after ``--warmup-minutes`` (graphs built, replay filling): each
role's RSS at the end is within ``--max-growth`` (5%) of its value at the
end of the warm-up, and ``tf_traces`` does not rise. Replay lives in the
learner's process and D4PG's default table (1M items) is larger than a
30-minute run fills, so the learner's RSS would grow with the data, not with
a leak: the soak caps replay at ``--max-replay-size`` (10,000 items, full
within the warm-up), so after the warm-up the learner holds a constant amount
of data and any growth is a leak. The replay size at each sample is recorded.

    python bench/soak.py [--minutes 30] [--sample-every 60] [--warmup-minutes 5]

Writes soak.json and soak.png (RSS per role, relative to its warm-up value,
with the tolerance band). Not part of CI: it takes ``--minutes``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import seeds as seeds_lib  # noqa: E402

BENCH = "soak"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Process titles Ray gives each role (the actors' title names the running method).
_ROLE_TITLES = [("learner", "ray::LearnerWorker"), ("actor", "ray::ActorWorker"),
                ("evaluator", "ray::Evaluator"), ("raylet", "/raylet "), ("gcs", "/gcs_server ")]


def _title(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def role_rss(cli_pid: int, field: str = "rss") -> Dict[str, float]:
    """RSS (or another ``memory_info`` field, e.g. ``shared``) in MiB per role.

    Actors are ``actor0``, ``actor1``... in PID order.
    """
    out = {"driver": getattr(psutil.Process(cli_pid).memory_info(), field) / 2**20}
    actors = []
    for proc in psutil.Process(cli_pid).children(recursive=True):
        title = _title(proc)
        for role, marker in _ROLE_TITLES:
            if marker in title or (marker.startswith("/") and title.split(" ")[0].endswith(
                    marker.strip())):
                try:
                    rss = getattr(proc.memory_info(), field) / 2**20
                except psutil.NoSuchProcess:
                    break
                if role == "actor":
                    actors.append((proc.pid, rss))
                else:
                    out[role] = out.get(role, 0.0) + rss
                break
    for i, (_, rss) in enumerate(sorted(actors)):
        out[f"actor{i}"] = rss
    return out


def last_learner_record(metrics_path: str) -> Dict[str, float]:
    """The newest learner record of the run's metrics (empty before the first)."""
    found: Dict[str, float] = {}
    if not os.path.exists(metrics_path):
        return found
    with open(metrics_path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            if record.get("role") == "learner" and "tf_traces" in record:
                found = record
    return found


def growth(samples: List[Dict], warmup_s: float) -> Dict[str, Dict[str, Optional[float]]]:
    """Per role: RSS at the first sample past the warm-up, at the end, and the change in %."""
    past = [s for s in samples if s["t"] >= warmup_s]
    if len(past) < 2:
        raise RuntimeError(f"too few samples after the {warmup_s:.0f}s warm-up: {len(past)}")
    first, last = past[0], past[-1]
    out = {}
    for role in sorted(set(first["rss_mib"]) & set(last["rss_mib"])):
        start, end = first["rss_mib"][role], last["rss_mib"][role]
        out[role] = {"warm_mib": start, "end_mib": end, "growth_pct": 100.0 * (end - start) / start}
        if role in first.get("shared_mib", {}) and role in last.get("shared_mib", {}):
            private = (start - first["shared_mib"][role], end - last["shared_mib"][role])
            out[role]["private_growth_pct"] = 100.0 * (private[1] - private[0]) / private[0]
    return out


def soak(minutes: float, sample_every: float, env: str, num_actors: int, max_replay_size: int,
         logdir: str) -> Dict:
    """Runs the soak and returns its samples, the stop outcome and the run's summary lines."""
    rlplat = os.path.join(os.path.dirname(sys.executable), "rlplat")
    command = [rlplat, "train", "d4pg", "--env", env, "--num-actors", str(num_actors),
               "--max-replay-size", str(max_replay_size), "--max-actor-steps", "100000000",
               "--logdir", logdir]
    out_path = logdir + ".out"
    samples: List[Dict] = []
    with open(out_path, "w") as out:
        proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        started = time.monotonic()
        metrics_path = os.path.join(logdir, "metrics.jsonl")
        try:
            while time.monotonic() - started < minutes * 60:
                time.sleep(sample_every)
                if proc.poll() is not None:
                    raise RuntimeError(f"the run ended early (exit {proc.returncode}); see {out_path}")
                record = last_learner_record(metrics_path)
                # Shared pages (libraries, and Ray's object store mapped into a
                # process that returns large values) count in RSS too: recorded
                # beside it, so a growth can be told apart from a private leak.
                sample = {"t": time.monotonic() - started, "rss_mib": role_rss(proc.pid),
                          "shared_mib": role_rss(proc.pid, "shared"),
                          "tf_traces": record.get("tf_traces"), "actor_steps": record.get("actor_steps"),
                          "learner_steps": record.get("step"), "replay_size": record.get("replay_size")}
                samples.append(sample)
                print(f"[soak] {sample['t'] / 60:5.1f} min  actor steps {sample['actor_steps']}  "
                      f"traces {sample['tf_traces']}  " + "  ".join(
                          f"{k} {v:.0f}" for k, v in sorted(sample["rss_mib"].items())), flush=True)
            stop_sent = time.monotonic()  # (a Ctrl-C of the bench lands in `finally`)
            os.kill(proc.pid, signal.SIGINT)
            code = proc.wait(timeout=120)
            stop_s = time.monotonic() - stop_sent
        finally:
            if proc.poll() is None:  # the bench itself was interrupted: stop the run as a user would
                os.kill(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    text = open(out_path).read()
    return {"samples": samples, "exit_code": code, "stop_s": stop_s,
            "final_checkpoint": "final checkpoint " in text,
            "last_lines": text.strip().splitlines()[-4:]}


def verdict(result: Dict, warmup_s: float, max_growth_pct: float) -> Dict:
    """Pass/fail per check, with the figures they rest on."""
    samples = result["samples"]
    per_role = growth(samples, warmup_s)
    past = [s for s in samples if s["t"] >= warmup_s]
    traces = [s["tf_traces"] for s in past if s["tf_traces"] is not None]
    replay = [s["replay_size"] for s in past if s["replay_size"] is not None]
    learner = per_role.get("learner")
    checks = {role: {**g, "ok": g["growth_pct"] < max_growth_pct}
              for role, g in per_role.items() if role != "learner"}
    if learner is not None:
        # Replay is part of the learner process: separate what its new items explain.
        items = (replay[-1] - replay[0]) if len(replay) >= 2 else None
        checks["learner"] = {**learner, "replay_items_added": items,
                             "ok": learner["growth_pct"] < max_growth_pct}
    return {"per_role": checks,
            "tf_traces": {"after_warmup": traces[0] if traces else None,
                          "end": traces[-1] if traces else None,
                          "ok": bool(traces) and traces[-1] == traces[0]},
            "stopped_cleanly": result["exit_code"] == 130 and result["final_checkpoint"],
            "ok": all(c["ok"] for c in checks.values()) and bool(traces) and traces[-1] == traces[0]}


def plot(result: Dict, report: Dict, warmup_s: float, max_growth_pct: float, path: str) -> None:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    samples = result["samples"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for role, g in sorted(report["per_role"].items()):
        points = [(s["t"] / 60, 100 * s["rss_mib"][role] / g["warm_mib"]) for s in samples
                  if role in s["rss_mib"]]
        ax.plot(*zip(*points), marker=".", label=f"{role} ({g['end_mib']:.0f} MiB, "
                                                  f"{g['growth_pct']:+.1f}%)")
    ax.axhspan(100 - max_growth_pct, 100 + max_growth_pct, color="0.9", zorder=0)
    ax.axvline(warmup_s / 60, color="0.5", linestyle=":")
    ax.set(xlabel="minutes", ylabel="RSS, % of its value after warm-up",
           title="memory per role (band: ±%g%%)" % max_growth_pct)
    ax.legend(fontsize=7)
    points = [(s["t"] / 60, s["tf_traces"]) for s in samples if s["tf_traces"] is not None]
    if points:
        ax2.step(*zip(*points), where="post")
    ax2.axvline(warmup_s / 60, color="0.5", linestyle=":")
    ax2.set(xlabel="minutes", ylabel="traces of replicated steps (learner)",
            title="tf.function traces: %s" % ("flat" if report["tf_traces"]["ok"] else "RETRACING"))
    fig.suptitle(f"D4PG soak: {'PASS' if report['ok'] else 'FAIL'}; "
                 f"{seeds_lib.machine().get('cpu_model', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-every", type=float, default=60.0, help="seconds")
    parser.add_argument("--warmup-minutes", type=float, default=5.0)
    parser.add_argument("--max-growth", type=float, default=5.0, help="percent")
    parser.add_argument("--env", default="cartpole:swingup")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--max-replay-size", type=int, default=10_000,
                        help="replay capacity, full within the warm-up (see the module docstring)")
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    args = parser.parse_args(argv)
    if args.warmup_minutes >= args.minutes:
        parser.error("--warmup-minutes must be shorter than --minutes")
    logdir = tempfile.mkdtemp(prefix="soak_") + "/run"
    result = soak(args.minutes, args.sample_every, args.env, args.num_actors, args.max_replay_size,
                  logdir)
    warmup_s = args.warmup_minutes * 60
    report = verdict(result, warmup_s, args.max_growth)
    record = {"bench": BENCH, "machine": seeds_lib.machine(), "command": " ".join(sys.argv),
              "settings": vars(args), "logdir": logdir, "report": report, **result}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{BENCH}.json"), "w") as f:
        json.dump(record, f, indent=1)
    plot(result, report, warmup_s, args.max_growth, os.path.join(args.out, f"{BENCH}.png"))
    for role, check in sorted(report["per_role"].items()):
        private = check.get("private_growth_pct")
        print(f"[soak] {role:10s} {check['warm_mib']:7.0f} -> {check['end_mib']:7.0f} MiB "
              f"({check['growth_pct']:+.1f}%; private {'-' if private is None else f'{private:+.1f}%'}) "
              f"{'ok' if check['ok'] else 'OVER'}")
    print(f"[soak] tf traces {report['tf_traces']}; stopped cleanly: {report['stopped_cleanly']}; "
          f"{'PASS' if report['ok'] else 'FAIL'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
