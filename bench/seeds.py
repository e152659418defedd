"""Learning benches over several seeds: per-seed records, a summary, and a band plot.

A learning bench runs one training run per seed (one after another: on a small
machine concurrent runs only share the same cores) and keeps each run's eval
curve in its own JSON file under ``results/runs/``, written as soon as that run
ends. A later call with the same variant and settings reuses those files, so a
long sweep interrupted by the end of a session continues where it stopped
instead of starting again. A run that replaces a record made under other
settings (a default changed since) sets the earlier record aside rather than
overwriting it.

``summarise`` reduces the runs to the figures a learning claim needs: the
median and worst env steps (and wall time) to the target over seeds, with
runs that never reached it counted as worst. ``plot_band`` draws the mean and
the min-max band over seeds against env steps and against wall time.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np


def machine() -> Dict[str, Any]:
    """The CPU model, its core count and whether it has AVX-512 (figures depend on it)."""
    model, flags = platform.processor() or "unknown", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model in ("unknown", "", "x86_64"):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = line
    except OSError:
        pass
    return {"cpu_model": model, "cpus": os.cpu_count(), "avx512": "avx512f" in flags.split()}


def run_path(out_dir: str, bench: str, variant: str, seed: int) -> str:
    """Where one seed's record of ``bench`` / ``variant`` lives."""
    return os.path.join(out_dir, "runs", f"{bench}-{variant}-seed{seed}.json")


def recorded_variants(out_dir: str, bench: str, superseded: bool = False) -> Dict[str, List[Dict[str, Any]]]:
    """Every seed record of ``bench`` under ``out_dir``, grouped by variant (seed order).

    With ``superseded``, the records that a later run of the same variant and
    seed under other settings set aside (``set_aside``) come too.
    """
    import glob  # pylint: disable=g-import-not-at-top
    import re  # pylint: disable=g-import-not-at-top

    live = re.compile(r"-seed\d+\.json$")
    variants: Dict[str, List[Dict[str, Any]]] = {}
    for path in sorted(glob.glob(os.path.join(out_dir, "runs", f"{bench}-*-seed*.json"))):
        if not superseded and not live.search(path):
            continue
        with open(path) as f:
            record = json.load(f)
        variants.setdefault(record["variant"], []).append(record)
    for records in variants.values():
        records.sort(key=lambda r: r["seed"])
    return variants


def set_aside(path: str) -> str:
    """Moves a record made under other settings out of a new run's way: ``<path>.supersededK.json``.

    A default that changes makes every earlier record of a variant differ from
    a new run of it; the earlier record is a result, so it is kept, not overwritten.
    """
    stem = path[:-len(".json")]
    k = 1
    while os.path.exists(f"{stem}.superseded{k}.json"):
        k += 1
    os.replace(path, f"{stem}.superseded{k}.json")
    return f"{stem}.superseded{k}.json"


def add_sweep_arguments(parser: Any, config_name: str, out_dir: str) -> None:
    """The flags every seeded learning bench shares: seeds, variant, overrides, reuse, output."""
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--variant", default="default", help="name of this configuration in the results")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help=f"{config_name} override (repeatable)")
    parser.add_argument("--no-reuse", action="store_true", help="rerun seeds that have a record")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the JSON and PNGs")
    parser.add_argument("--out", default=out_dir)


def seed_list(args: Any) -> List[int]:
    """The seeds ``add_sweep_arguments``' flags ask for (at least one)."""
    if args.seeds < 1:
        raise SystemExit("--seeds must be >= 1")
    return list(range(args.first_seed, args.first_seed + args.seeds))


def parse_overrides(config_class: Any, pairs: Sequence[str]) -> Dict[str, Any]:
    """``--set FIELD=VALUE`` pairs -> config overrides, typed like ``config_class``'s defaults.

    Bools take 1/true/yes (anything else is False), tuples comma-separated
    ints, a field whose default is None an int or "none". The overrides are
    validated by building the config once, before any run starts.
    """
    defaults = config_class()
    out: Dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or name.startswith("_") or not hasattr(defaults, name):
            raise SystemExit(f"--set {pair!r}: expected FIELD=VALUE with a {config_class.__name__} field")
        default = getattr(defaults, name)
        if isinstance(default, bool):
            out[name] = text.lower() in ("1", "true", "yes")
        elif isinstance(default, tuple):
            out[name] = tuple(int(x) for x in text.split(","))
        elif default is None:
            out[name] = None if text == "none" else int(text)
        else:
            out[name] = type(default)(text)
    try:
        config_class(**out)
    except ValueError as e:
        raise SystemExit(f"--set: {e}") from None
    return out

def _same_run(saved: Dict[str, Any], settings: Dict[str, Any], config: Optional[Dict[str, Any]]) -> bool:
    """Whether a saved record ran ``settings`` and, when given, the whole ``config`` (JSON-normalised:
    a default that changed since makes it another run)."""
    if saved.get("settings") != settings:
        return False
    return config is None or json.loads(json.dumps(saved.get("config"))) == json.loads(json.dumps(config))


def run_seeds(out_dir: str, bench: str, variant: str, seeds: Sequence[int], settings: Dict[str, Any],
              run_one: Callable[[int], Dict[str, Any]], reuse: bool = True,
              config: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
    """Runs ``run_one(seed)`` for each seed; returns their records in seed order.

    A record must hold ``eval_curve`` (a list of dicts with ``actor_steps``,
    ``seconds`` and ``eval_return``). With ``reuse``, a seed whose record
    exists with the same ``settings`` (and, if ``config`` is given, the same
    whole config in its ``config``) is not run again; a record of another
    run is set aside (``set_aside``) when the new one is written.
    """
    records = []
    for seed in seeds:
        path = run_path(out_dir, bench, variant, seed)
        if reuse and os.path.exists(path):
            with open(path) as f:
                saved = json.load(f)
            if _same_run(saved, settings, config):
                print(f"[{bench}/{variant}] seed {seed}: reusing {os.path.relpath(path)}", flush=True)
                records.append(saved)
                continue
        record = dict(run_one(seed), seed=seed, variant=variant, settings=settings, machine=machine())
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            with open(path) as f:
                earlier = json.load(f)
            if not _same_run(earlier, settings, config):
                print(f"[{bench}/{variant}] seed {seed}: the record made under other settings is kept as "
                      f"{os.path.relpath(set_aside(path))}", flush=True)
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
        records.append(record)
    return records


def read_metrics(logdir: str) -> List[Dict[str, Any]]:
    """Every record of a run's ``metrics.jsonl`` (each role's, in the order written)."""
    with open(os.path.join(logdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def eval_curve(records: Sequence[Dict[str, Any]], start: float) -> List[Dict[str, Any]]:
    """The evaluator's points: seconds since ``start``, actor and learner steps, and the return."""
    return [{"seconds": r["wall_time"] - start, "actor_steps": r["step"], "learner_steps": r.get("learner_steps"),
             "eval_return": r["eval_return"]} for r in records if r.get("role") == "evaluator"]


def scalar_summary(summary: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON-plain entries (numbers, strings, None) of a run's summary."""
    return {k: v for k, v in summary.items() if isinstance(v, (int, float, str, type(None)))}


def first_reaching(curve: Sequence[Dict[str, Any]], target: Optional[float]) -> Optional[Dict[str, Any]]:
    """The first eval point whose return is >= ``target``, or None (always None without a target)."""
    if target is None:
        return None
    return next((p for p in curve if p["eval_return"] >= target), None)


def summarise(records: Sequence[Dict[str, Any]], target: Optional[float],
              budget_steps: int) -> Dict[str, Any]:
    """Median and worst steps / seconds to ``target`` over seeds, and the final returns.

    A seed that never reached the target counts as ``budget_steps`` (and its
    total seconds) for the median, and makes the worst case "not reached".
    ``final_return`` is the mean of each run's last 3 evals.
    """
    steps, seconds, finals, per_seed = [], [], [], []
    for r in records:
        hit = first_reaching(r["eval_curve"], target)
        last = [p["eval_return"] for p in r["eval_curve"][-3:]]
        finals.append(float(np.mean(last)) if last else float("nan"))
        steps.append(hit["actor_steps"] if hit else budget_steps)
        seconds.append(hit["seconds"] if hit else r.get("total_wall_seconds", float("nan")))
        per_seed.append({"seed": r["seed"], "reached": hit is not None,
                         "actor_steps_to_target": hit["actor_steps"] if hit else None,
                         "seconds_to_target": hit["seconds"] if hit else None,
                         "final_return": finals[-1]})
    reached_all = all(s["reached"] for s in per_seed)
    return {
        "num_seeds": len(records),
        "target": target,
        "reached": sum(s["reached"] for s in per_seed),
        "median_steps_to_target": statistics.median(steps) if steps else None,
        "worst_steps_to_target": max(steps) if steps and reached_all else None,
        "median_seconds_to_target": statistics.median(seconds) if seconds else None,
        "final_return_mean": float(np.mean(finals)) if finals else None,
        "final_return_std": float(np.std(finals)) if finals else None,
        "per_seed": per_seed,
    }


def summary_line(name: str, summary: Dict[str, Any]) -> str:
    """One line: reached n/N, median and worst env steps to the target."""
    worst = summary["worst_steps_to_target"]
    if summary["target"] is None:
        return (f"{name}: {summary['num_seeds']} seeds, final return {summary['final_return_mean']:.1f} "
                f"± {summary['final_return_std']:.1f}")
    return (f"{name}: {summary['reached']}/{summary['num_seeds']} seeds reached "
            f"{summary['target']:g}; median {summary['median_steps_to_target']:,.0f} env steps "
            f"({summary['median_seconds_to_target']:.0f} s), worst "
            + ("not reached" if worst is None else f"{worst:,.0f} env steps"))


def _band(records, key: str, grid: np.ndarray):
    """Each run's return on ``grid`` (held at its last eval after it stopped)."""
    rows = []
    for r in records:
        xs = np.array([p[key] for p in r["eval_curve"]], float)
        ys = np.array([p["eval_return"] for p in r["eval_curve"]], float)
        if len(xs) == 0:
            continue
        row = np.interp(grid, xs, ys, left=np.nan, right=ys[-1])
        rows.append(row)
    rows = np.array(rows)
    return np.nanmean(rows, 0), np.nanmin(rows, 0), np.nanmax(rows, 0)


def plot_band(groups: Dict[str, Sequence[Dict[str, Any]]], target: Optional[float], title: str,
              path: str) -> None:
    """Mean and min-max band over seeds for each group, against env steps and wall time."""
    import warnings  # pylint: disable=g-import-not-at-top

    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((axes[0], "actor_steps", "env steps"), (axes[1], "seconds", "wall time (s)")):
        for name, records in groups.items():
            end = max((p[key] for r in records for p in r["eval_curve"]), default=0)
            if not end:
                continue
            grid = np.linspace(0, end, 200)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # grid points before any eval
                mean, low, high = _band(records, key, grid)
            line, = ax.plot(grid, mean, label=f"{name} ({len(records)} seeds)")
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2)
        if target is not None:
            ax.axhline(target, color="gray", ls="--", lw=1)
        ax.set_xlabel(label)
        ax.set_ylabel("greedy eval return")
    axes[0].legend(fontsize=8)
    fig.suptitle(title + " (mean, min-max band; a run that stopped at the target holds its last eval)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
