"""A run's health from what it already writes: ``config.json``, ``run_info.json``,
``metrics.jsonl`` and ``checkpoints/``.

``read_status(logdir)`` returns a plain dict (the ``rlplat status --json``
output); ``format_status`` turns it into the lines ``rlplat status`` prints.
Nothing here talks to the run: it works while the run is live (the files are
appended as it goes) and after it ended, on the machine that holds the run
directory.

Liveness: ``run_info.json`` records the driver's host name and PID. On the
same host, a live PID whose command line is an rlplat/Python process means
the run is live; elsewhere the age of the newest record is all there is.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any, Dict, List, Optional

from rlplat import replay_shards
from rlplat import run_dir

# Rates are averaged over the records of this many recent seconds.
_RECENT_S = 60.0


class StatusError(ValueError):
    """The directory is not an rlplat run; the message names the fix."""


def _json(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def _records(path: str) -> List[Dict[str, Any]]:
    from rlplat.utils import loggers  # pylint: disable=g-import-not-at-top  (one reader of metrics.jsonl)

    return loggers.read_jsonl(path)


def _liveness(info: Dict[str, Any], newest_wall_time: Optional[float], now: float) -> Dict[str, Any]:
    pid, host = info.get("pid"), info.get("hostname")
    age = None if newest_wall_time is None else max(0.0, now - newest_wall_time)
    if pid is not None and host == socket.gethostname():
        try:
            with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
            alive = "rlplat" in command or "python" in command
        except OSError:
            alive = False
        return {"state": "live" if alive else "ended", "pid": pid, "host": host,
                "last_record_age_s": age}
    state = ("unknown (run on another host)" if pid is not None
             else "unknown (run_info.json records no driver pid)")
    return {"state": state, "pid": pid, "host": host, "last_record_age_s": age}


def _rate(records: List[Dict[str, Any]], key: str) -> Optional[float]:
    """Mean of ``key`` over the records of the last ``_RECENT_S`` seconds of the run."""
    timed = [r for r in records if isinstance(r.get(key), (int, float)) and "wall_time" in r]
    if not timed:
        return None
    end = timed[-1]["wall_time"]
    recent = [r[key] for r in timed if r["wall_time"] >= end - _RECENT_S]
    return sum(recent) / len(recent)


def _checkpoint(logdir: str) -> Optional[Dict[str, Any]]:
    """The newest checkpoint the state file names (orphans a crash left are not checkpoints)."""
    step = run_dir.latest_step(logdir, verify=False)
    if step is None:
        return None
    prefix = run_dir.checkpoint_prefix(logdir, step)
    counters = _json(run_dir.counters_path(logdir)).get(str(step), {})
    counters = counters if isinstance(counters, dict) else {}
    return {"learner_step": step, "path": prefix, "saved": os.path.getmtime(prefix + ".index"),
            "actor_steps": counters.get("actor_steps")}


def read_status(logdir: str, now: Optional[float] = None) -> Dict[str, Any]:
    """Everything ``rlplat status`` shows about the run in ``logdir``.

    Raises:
      StatusError: ``logdir`` holds no rlplat run.
    """
    now = time.time() if now is None else now
    metrics_path = run_dir.metrics_path(logdir)
    if not os.path.isdir(logdir):
        raise StatusError(f"{logdir} is not a directory; pass --logdir of an rlplat run")
    if not os.path.exists(metrics_path) and not os.path.exists(run_dir.run_info_path(logdir)):
        raise StatusError(f"{logdir} has neither metrics.jsonl nor run_info.json; pass the directory "
                          "`rlplat train` wrote (its --logdir)")
    try:
        run_dir.check_run_files(logdir)
    except run_dir.RunDirError as e:
        raise StatusError(str(e)) from None
    info = _json(run_dir.run_info_path(logdir))
    config = _json(run_dir.config_path(logdir)) or info.get("config", {})
    records = _records(metrics_path)
    by_role: Dict[str, List[Dict[str, Any]]] = {}
    for record in records:
        by_role.setdefault(str(record.get("role")), []).append(record)
    learner = by_role.get("learner", [])
    last_learner = learner[-1] if learner else {}
    evals = [r for r in by_role.get("evaluator", []) if "eval_return" in r]
    newest = max((r["wall_time"] for r in records if "wall_time" in r), default=None)

    # The driver writes an actor record (at its step count) as each chunk
    # returns and the learner record only periodically: the newer of the two.
    counts = [last_learner.get("actor_steps"), by_role["actor"][-1].get("step") if by_role.get("actor") else None]
    counts = [c for c in counts if c is not None]
    actor_steps = max(counts) if counts else None
    env_rate = _rate(learner, "env_steps_per_second")
    max_steps = config.get("max_actor_steps")
    liveness = _liveness(info, newest, now)
    eta_s = None
    if liveness["state"] == "live" and max_steps and actor_steps is not None and env_rate:
        eta_s = max(0.0, (max_steps - actor_steps) / env_rate)

    placement = info.get("node_placement") or {}
    roles = {role: {"node_ip": where.get("node_ip"), "node_id": str(where.get("node_id", ""))[:8],
                    "pid": where.get("pid")}
             for role, where in placement.items() if isinstance(where, dict)}
    events = [r for r in by_role.get("driver", []) if "event" in r]
    return {
        "logdir": os.path.abspath(logdir),
        "agent": info.get("builder"), "env": config.get("env"), "seed": config.get("seed"),
        "started": info.get("started"), "resumed_from_step": info.get("resumed_from_step"),
        "run": liveness,
        "roles": roles, "num_actors": config.get("num_actors"),
        "actor_steps": actor_steps, "max_actor_steps": max_steps,
        "learner_steps": last_learner.get("learner_steps", last_learner.get("step")),
        "env_steps_per_s": env_rate,
        "learner_steps_per_s": _rate(learner, "learner_steps_per_second"),
        "replay_size": last_learner.get("replay_size"),
        "samples_per_insert": last_learner.get("samples_per_insert"),
        "samples_per_insert_target": config.get("agent", {}).get("samples_per_insert"),
        "replay_shards": _replay_shards(last_learner),
        "policy_lag": last_learner.get("policy_lag"),
        "learner_input_wait_fraction": last_learner.get("learner_input_wait_fraction"),
        "actor_restarts": last_learner.get("actor_restarts"),
        "last_eval": ({"return": evals[-1]["eval_return"], "actor_steps": evals[-1].get("step"),
                       "learner_steps": evals[-1].get("learner_steps"),
                       "age_s": now - evals[-1]["wall_time"] if "wall_time" in evals[-1] else None}
                      if evals else None),
        "best_eval": max((r["eval_return"] for r in evals), default=None),
        # Runs before the experiment/layout split kept the schedule under "layout".
        "target_eval_return": (config.get("schedule") or config.get("layout") or {}).get("target_eval_return"),
        "checkpoint": _checkpoint(logdir),
        "eta_s": eta_s,
        "events": [{k: r.get(k) for k in ("event", "actor_index", "step", "wall_time")}
                   for r in events[-5:]],
    }


def _num(value: Any, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)


def _age(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


def format_status(status: Dict[str, Any]) -> List[str]:
    """The human-readable lines of ``rlplat status``."""
    run = status["run"]
    lines = [f"run      {status['logdir']}",
             f"         {status.get('agent') or '?'} on {status.get('env') or '?'}, seed "
             f"{status.get('seed')}, started {status.get('started') or '?'}"
             + (f", resumed from step {status['resumed_from_step']}"
                if status.get("resumed_from_step") is not None else ""),
             f"state    {run['state']}" + (f" (driver pid {run['pid']} on {run.get('host')})"
                                             if run.get("pid") is not None else "")
             + f"; newest record {_age(run.get('last_record_age_s'))} ago"]
    if status["roles"]:
        lines.append("roles    " + "; ".join(f"{role} on {where['node_ip']} ({where['node_id']})"
                                           for role, where in sorted(status["roles"].items())))
    progress = f"progress {_num(status['actor_steps'])}"
    if status.get("max_actor_steps"):
        progress += f" / {_num(status['max_actor_steps'])}"
    progress += f" env steps, {_num(status['learner_steps'])} learner steps"
    lines.append(progress)
    lines.append(f"rates    {_num(status['env_steps_per_s'], ',.1f')} env steps/s, "
                 f"{_num(status['learner_steps_per_s'], ',.1f')} learner steps/s "
                 f"(mean of the last {_RECENT_S:.0f}s of records)")
    spi = _num(status["samples_per_insert"], ".1f")
    if status.get("samples_per_insert_target") is not None:
        spi += f" (target {status['samples_per_insert_target']:g})"
    lines.append(f"replay   {_num(status['replay_size'])} items, samples per insert {spi}; "
                 f"policy lag {_num(status['policy_lag'], ',.0f')} learner steps; "
                 f"actor restarts {_num(status['actor_restarts'])}")
    if status.get("replay_shards"):
        lines.append("shards   " + "; ".join(
            f"{i}: {_num(shard['size'])} items, samples per insert {_num(shard['samples_per_insert'], '.1f')}"
            for i, shard in enumerate(status["replay_shards"])))
    wait = status.get("learner_input_wait_fraction")
    if wait is not None:
        side = "actors/replay set the pace" if wait > 0.5 else "its own compute sets the pace"
        lines.append(f"learner  waits for batches {100 * wait:.0f}% of its time ({side})")
    last = status.get("last_eval")
    if last:
        target = status.get("target_eval_return")
        lines.append(f"eval     last {last['return']:.1f} at {_num(last['actor_steps'])} env steps "
                     f"({_age(last['age_s'])} ago), best {status['best_eval']:.1f}"
                     + (f", target {target:g}" if target is not None else ""))
    else:
        lines.append("eval     none yet")
    ckpt = status.get("checkpoint")
    lines.append(f"ckpt     {ckpt['path']} (learner step {ckpt['learner_step']:,}, "
                 f"{_age(time.time() - ckpt['saved'])} ago)" if ckpt else "ckpt     none yet")
    if status.get("eta_s") is not None:
        lines.append(f"eta      {_age(status['eta_s'])} to {_num(status['max_actor_steps'])} env steps "
                     "at the current rate")
    for event in status["events"]:
        lines.append(f"event    {event['event']}" + (f" (actor {event['actor_index']})"
                                                      if event.get("actor_index") is not None else ""))
    return lines


def _replay_shards(record: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Each replay shard's counts from a learner record (``--num-replay-shards`` > 1); [] otherwise."""
    shards = []
    while replay_shards.metric_key(len(shards), "inserts") in record:
        i = len(shards)
        shards.append({key: record.get(replay_shards.metric_key(i, key))
                       for key in ("size", "inserts", "samples", "samples_per_insert")})
    return shards
