"""Learning curves from run directories: load, group by config, average with a band.

Pure logic (NumPy, JSON) under ``rlplat plot`` and the sweep summary. A run
directory holds ``metrics.jsonl`` (one record per line, each with ``step``,
``wall_time`` and ``role``) and ``config.json`` (the run's settings, with
``agent`` and ``layout`` sections and ``seed``).

Runs whose configs differ only in their seed (and in bookkeeping such as
step budgets) form one group: its curve is the mean over runs on a common x
grid, its band the min-max over runs, so three seeds show their whole spread.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from rlplat import run_dir
from rlplat.utils import loggers

X_AXES = ("env_steps", "learner_steps", "wall_time")

# Config keys that say nothing about the experiment itself: a run resumed with
# a larger budget, or a seed, stays in its group.
_BOOKKEEPING = {"seed", "max_actor_steps", "max_steps", "argv", "logdir", "resume",
                "layout.console_every_s", "layout.log_to_driver", "layout.checkpoint_every_s",
                "layout.target_eval_return", "layout.stop_timeout_s", "layout.startup_timeout_s",
                "layout.call_timeout_s", "layout.weights_timeout_s", "layout.console", "layout.address",
                "schedule.checkpoint_every_s", "schedule.target_eval_return"}


class CurveError(ValueError):
    """A run directory or metric that cannot be plotted; the message names the fix."""


@dataclasses.dataclass(frozen=True)
class Run:
    """One run directory's records and flattened config."""

    path: str
    config: Dict[str, Any]
    records: Tuple[Dict[str, Any], ...]

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))


def flatten(config: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``{"agent": {"sigma": 0.3}}`` -> ``{"agent.sigma": 0.3}`` (lists become tuples)."""
    out: Dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out


def load_run(path: str) -> Run:
    """Reads ``path``'s metrics and config (a missing config is an empty one)."""
    metrics = run_dir.metrics_path(path)
    if not os.path.isdir(path):
        raise CurveError(f"{path} is not a directory; pass run directories (each with metrics.jsonl)")
    if not os.path.exists(metrics):
        raise CurveError(f"{path} has no metrics.jsonl; pass the directory of an rlplat run")
    try:
        run_dir.check_run_files(path)
    except run_dir.RunDirError as e:
        raise CurveError(str(e)) from None
    records = loggers.read_jsonl(metrics)
    config: Dict[str, Any] = {}
    config_path = run_dir.config_path(path)
    if os.path.exists(config_path):
        try:
            config = flatten(run_dir.read_json_object(config_path, "run config"))
        except run_dir.RunDirError as e:
            raise CurveError(str(e)) from None
    return Run(path=path, config=config, records=tuple(records))


def _x_of(record: Dict[str, Any], x: str, start_time: float) -> Optional[float]:
    role = record.get("role")
    if x == "wall_time":
        return record["wall_time"] - start_time if "wall_time" in record else None
    if x == "env_steps":
        if "actor_steps" in record:
            return record["actor_steps"]
        # Evaluator and actor records are stamped with the system's actor steps.
        return record.get("step") if role in ("evaluator", "actor") else None
    if x == "learner_steps":
        if "learner_steps" in record:
            return record["learner_steps"]
        return record.get("step") if role == "learner" else None
    raise CurveError(f"unknown x axis {x!r}; use one of {', '.join(X_AXES)}")


def points(run: Run, metric: str, x: str) -> np.ndarray:
    """``[[x, value], ...]`` of ``metric`` in ``run``, sorted by x (finite values only).

    A resumed run re-logs the steps after its checkpoint: the last record at
    an x wins.
    """
    start = min((r["wall_time"] for r in run.records if "wall_time" in r), default=0.0)
    by_x: Dict[float, float] = {}
    for record in run.records:
        value = record.get(metric)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        at = _x_of(record, x, start)
        if at is not None and np.isfinite(value):
            by_x[float(at)] = float(value)
    return np.array(sorted(by_x.items()), dtype=np.float64).reshape(-1, 2)


def metrics_of(runs: Sequence[Run]) -> List[str]:
    """Every numeric metric name any of ``runs`` logged (for an error message)."""
    names = set()
    for run in runs:
        for record in run.records:
            names.update(k for k, v in record.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)
                         and k not in ("step", "wall_time"))
    return sorted(names)


def group(runs: Sequence[Run]) -> Dict[str, List[Run]]:
    """Runs by config (seed and bookkeeping aside), labelled by what tells the groups apart.

    The label lists the config keys whose values differ between groups
    (``agent.sigma=0.2``); with one group, the agent's environment.
    """
    def key_of(run: Run) -> Tuple:
        return tuple(sorted((k, repr(v)) for k, v in run.config.items() if k not in _BOOKKEEPING))

    groups: Dict[Tuple, List[Run]] = {}
    for run in runs:
        groups.setdefault(key_of(run), []).append(run)
    keys = list(groups)
    differing = sorted({k for key in keys for k, _ in key
                        if len({dict(other).get(k) for other in keys}) > 1})
    labels: Dict[str, List[Run]] = {}
    for key in keys:
        values = dict(key)
        if differing:
            label = ", ".join(f"{_short(k)}={_shown(values.get(k))}" for k in differing)
        else:
            label = str(groups[key][0].config.get("env", groups[key][0].name))
        labels[label] = groups[key]
    return labels


def _short(key: str) -> str:
    return key.split(".", 1)[1] if key.startswith(("agent.", "layout.")) else key


def _shown(value: Optional[str]) -> str:
    if value is None:
        return "-"
    text = value.strip("'\"")
    return text.replace(" ", "")


def band(curves: Sequence[np.ndarray], num_points: int = 200) -> Dict[str, np.ndarray]:
    """Mean and min-max band of ``curves`` (each ``[[x, y], ...]``) where they all have data.

    Each curve is linearly interpolated onto a grid from the largest first x
    to the smallest last x, so every point averages every run; ``n`` is the
    number of runs. A single run gives its own curve, band of zero width.
    """
    curves = [c for c in curves if len(c)]
    if not curves:
        raise CurveError("no run has data for this metric and x axis")
    low = max(c[0, 0] for c in curves)
    high = min(c[-1, 0] for c in curves)
    if high < low:
        raise CurveError("the runs' x ranges do not overlap; compare runs of similar length")
    grid = np.linspace(low, high, num_points) if high > low else np.array([low])
    ys = np.stack([np.interp(grid, c[:, 0], c[:, 1]) for c in curves])
    return {"x": grid, "mean": ys.mean(0), "min": ys.min(0), "max": ys.max(0),
            "n": np.full(grid.shape, len(curves))}
