"""Builds bench/README.md, the index of benchmarks, from the benches' own docstrings and JSON.

For every bench: what it measures (the first line of its module docstring),
how to run it, its latest headline figures (read from ``bench/results/``),
the machine they came from, and its plot. Nothing in the page is typed by
hand, so it cannot disagree with the code or the results;
``tests/docs/test_docs.py`` fails when the committed page is stale.

    python bench/bench_index.py            # rewrite bench/README.md
    python bench/bench_index.py --check    # exit 1 if bench/README.md is stale
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # run as a script, bench/ is on the path already; imported, it may not be
    sys.path.insert(0, HERE)

import d4pg_suite  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import seeds  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
RESULTS = os.path.join(HERE, "results")
INDEX = os.path.join(HERE, "README.md")


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _throughput_d4pg(d: Dict[str, Any]) -> List[str]:
    t = d["targets"]
    return [f"actor efficiency {_fmt(t['actor_efficiency_1']['value'])} (1 actor), "
            f"{_fmt(t['actor_efficiency_2']['value'])} (2 actors); aim {t['actor_efficiency_1']['aim']}",
            f"learner fed from Reverb / memory-fed: {_fmt(t['learner_feed_ratio']['value'])} "
            f"(target {t['learner_feed_ratio']['target']})",
            f"system: {_fmt(d['system']['env_steps_per_s'])} env steps/s, "
            f"{_fmt(t['system_ratio']['value'])} of the learner-bound limit"] + _precision(d) + _vectorised_actors(
                "d4pg_throughput")


def _precision(d: Dict[str, Any]) -> List[str]:
    p = d.get("precision")
    if not p:
        return []
    return [f"learner bf16 / fp32 (memory-fed, A B B A): {_fmt(p['ratio'], 2)} ({_fmt(p['bf16_steps_per_s'])} vs "
            f"{_fmt(p['fp32_steps_per_s'])} steps/s; target {p['target_ratio']}; CPU bf16 flags: "
            f"{', '.join(p['cpu_bf16_flags']) or 'none'})"]


def _throughput_impala(d: Dict[str, Any]) -> List[str]:
    s = d["system"]
    return [f"system: {_fmt(s['env_frames_per_s'])} env frames/s, learner "
            f"{_fmt(s['learner_steps_per_s'])} steps/s, consumed/produced "
            f"{_fmt(s['consumed_over_produced'])} (learner frames include the zero padding of each "
            f"episode's last unroll, so short episodes read above 1)"] + _vectorised_actors("impala_throughput")


def _vectorised_actors(stem: str) -> List[str]:
    """One line per ``<stem>_actor_envs<K>.json`` (``--parts actor --envs-per-actor K``), by K."""
    prefix = f"{stem}_actor_envs"
    found = sorted((int(name[len(prefix):-5]), name) for name in os.listdir(RESULTS)
                   if name.startswith(prefix) and name.endswith(".json") and name[len(prefix):-5].isdigit())
    lines = []
    for k, name in found:
        with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
            results = json.load(f)["actor"]["results"]
        lines.append(f"{name}: {k} environments per actor: efficiency "
                     f"{_fmt(results['1']['efficiency'])} (1 actor), {_fmt(results['2']['efficiency'])} (2 actors)")
    return lines


def _pull_rate(d: Dict[str, Any]) -> List[str]:
    return [f"pull period {name}: {_fmt(rate)} env steps/s ({_fmt(d['ratio_to_first'][name])} of the first)"
            for name, rate in d["median_env_steps_per_s"].items()]


def _learning(d: Dict[str, Any]) -> List[str]:
    lines = [seeds.summary_line(name, variant["summary"]) for name, variant in sorted(d["variants"].items())]
    ratio = d.get("precision_ratio")
    if ratio:
        lines.append(f"wall seconds to the target, median, {ratio['variant']} over {ratio['over']}: "
                     f"{ratio['median_seconds'][1]:.0f} / {ratio['median_seconds'][0]:.0f} s = {ratio['ratio']:.2f}")
    return lines + ["full table: [results.md](results.md)"]


def _suite(d: Dict[str, Any]) -> List[str]:
    lines = []
    for variant, tasks in sorted(d["variants"].items()):
        for task, entry in tasks.items():
            s500 = entry["scores"]["500000"]
            score = "-" if s500["mean"] is None else f"{s500['mean']:.0f} ± {s500['std']:.0f}"
            source = "CURL's" if entry.get("published_source") == d4pg_suite.CURL else "TD-MPC2's"
            ratio = "" if s500["ratio"] is None else f", {s500['ratio']:.2f}x {source} state SAC"
            name = entry.get("name", variant) + (", earlier defaults" if entry.get("earlier_defaults") else "")
            lines.append(f"[{name}] {task}: {entry['num_seeds']} seed(s), 500k score {score}{ratio}")
    return lines + ["full table: [results.md](results.md)"]


def _torture(d: Dict[str, Any]) -> List[str]:
    return [f"{'PASS' if d['passed'] else 'FAIL'}: {d['kills']} kills ({d['during_save']} during a save; "
            f"{d['by_target']}), final eval {_fmt(d['final_eval'])} vs uninterrupted "
            f"{[_fmt(r) for r in d['reference_evals']]}; problems: {d['problems'] or 'none'}"]


def _replay_packing(d: Dict[str, Any]) -> List[str]:
    return [f"one column per field / packed: write cost {_fmt(d['write_cost_ratio_columns_over_packed'])}x, "
            f"sample cost {_fmt(d['sample_cost_ratio_columns_over_packed'])}x"]


def _replication(d: Dict[str, Any]) -> List[str]:
    o = d["overhead_at_1_replica"]
    return [f"overhead at 1 replica: {_fmt(100 * o['per_call'], 2)}% per call, "
            f"{_fmt(100 * o['in_graph'], 2)}% in graph"]


def _soak(d: Dict[str, Any]) -> List[str]:
    report, settings = d["report"], d["settings"]
    worst = max(report["per_role"].items(), key=lambda kv: kv[1]["growth_pct"])
    return [f"{_fmt(settings['minutes'])} min: largest RSS growth after warm-up {worst[0]} "
            f"{_fmt(worst[1]['growth_pct'], 2)}% (bar {_fmt(settings['max_growth'])}%); "
            f"verdict {'ok' if report['ok'] else 'FAILED'}"]


def _roofline(d: Dict[str, Any]) -> List[str]:
    lines = [f"{d['device']} ({d['backend']}, TF threads {d['settings'].get('tf_threads')}): "
             f"{_fmt(d['learner_steps_per_s'])} learner steps/s x {_fmt(d['step_gflop'])} GFLOP = "
             f"{_fmt(d['achieved_gflop_per_s'])} GFLOP/s, {_fmt(100 * d['fraction_of_peak'], 2)}% of the "
             f"same-shape fp32 peak ({_fmt(d['peak_same_shapes_gflop_per_s'])}; target 50%); "
             f"matmul count equals the traced graph's: {d['matmuls_match_graph']}"]
    bf16, ratio = d.get("by_precision", {}).get("bf16"), d.get("bf16_over_fp32")
    if bf16 and ratio:
        lines.append(f"bf16: {_fmt(bf16['learner_steps_per_s'])} learner steps/s "
                     f"({_fmt(ratio['learner_steps_per_s'], 2)}x "
                     f"fp32; target 1.4x), {_fmt(100 * bf16['fraction_of_peak'], 2)}% of the same-shape bf16 peak "
                     f"({_fmt(bf16['peak_same_shapes_gflop_per_s'])}, {_fmt(ratio['peak_same_shapes'], 2)}x fp32's)")
    for name in sorted(os.listdir(RESULTS)):
        if name.startswith("learner_roofline_gpu") and name.endswith(".json"):
            with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
                g = json.load(f)
            lines.append(f"{name}: {g['device']}, {g['env']}, {g['backend']}: "
                         f"{_fmt(g['learner_steps_per_s'])} steps/s")
        elif name.startswith("learner_roofline_") and name.endswith(".json"):  # another CPU's run
            with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
                g = json.load(f)
            other = [f"{name}: {_machine(g)}: fp32 {_fmt(g['learner_steps_per_s'])} learner steps/s"]
            if g.get("bf16_over_fp32"):
                other.append(f"bf16 {_fmt(g['by_precision']['bf16']['learner_steps_per_s'])} "
                             f"({_fmt(g['bf16_over_fp32']['learner_steps_per_s'], 2)}x fp32)")
            lines.append(", ".join(other))
    return lines


def _capacity_lines(c: Dict[str, Any]) -> List[str]:
    agent = c.get("agent", "d4pg")
    return [f"{agent}: server CPU {_fmt(c['server_cpu_us_per_insert'])} us per item written, "
            f"{_fmt(c['server_cpu_us_per_sampled_item'])} us per item sampled",
            f"{agent}: one server core: {_fmt(c['inserts_per_s_per_server_core_no_sampling'])} items/s alone, "
            f"{_fmt(c['inserts_per_s_per_server_core'])} at samples-per-insert {_fmt(c['samples_per_insert'])} "
            f"= {_fmt(c[f'{agent}_actors_per_server_core'])} {agent.upper()} actors at "
            f"{_fmt(c[f'{agent}_actor_env_steps_per_s'])} env steps/s each"]


def _replay_capacity(d: Dict[str, Any]) -> List[str]:
    lines = _capacity_lines(d["capacity"])
    impala = os.path.join(RESULTS, "replay_capacity_impala.json")  # `--agent impala`
    if os.path.exists(impala):
        with open(impala, encoding="utf-8") as f:
            lines += _capacity_lines(json.load(f)["capacity"])
    return lines


def _scaling(d: Dict[str, Any]) -> List[str]:
    lines = []
    m = d.get("measured")
    if m:
        lines.append("measured env steps/s by actors, learner off: " + ", ".join(
            f"{n}: {_fmt(v)}" for n, v in m["learner_off_env_steps_per_s"].items()) + "; learner on: " + ", ".join(
            f"{n}: {_fmt(v)}" for n, v in m["learner_on_env_steps_per_s"].items()))
    for key, text in d.get("bottlenecks", {}).items():
        last = d["model"][key][-1]
        lag = f"; at {last['nodes']} nodes a lag of {last['lag_learner_steps']:,.0f} learner steps" \
            if "lag_learner_steps" in last else ""
        lines.append(f"model, {key}: bottleneck {text}{lag}")
    return lines + ["full model: [results/scaling.md](results/scaling.md)"]


def _envpool(d: Dict[str, Any]) -> List[str]:
    lines = []
    for t in d["tasks"]:
        diffs = t.get("max_obs_diff_after_steps")
        same = (f"observations differ by at most {_fmt(diffs['200'])} over 200 steps from the same state" if diffs
                else t.get("equivalence", "-"))
        lines.append(f"{t['task']} ({t['envpool_task']}): {same}; steps/s dm_control "
                     f"{_fmt(t['dm_control_steps_per_s'])}, EnvPool 1 env {_fmt(t['envpool_1_env_steps_per_s'])}, "
                     f"8 envs on 1 thread {_fmt(t['envpool_8_envs_1_thread_steps_per_s'])} (load average "
                     f"{_fmt(d['load_average'][0])} when measured)")
    return lines


def _bc_noise(d: Dict[str, Any]) -> List[str]:
    teachers = sorted({r["teacher_seed"] for r in d["rows"]})
    return [f"rollout_noise {noise}: {s['below_bar_at_end']}/{s['students']} students below {d['bar']:g} x their "
            f"teacher at the end, {s['below_bar_at_any_eval']} at some evaluation; worst final ratio "
            f"{_fmt(s['worst_final_ratio'])} ({len(teachers)} teachers)" for noise, s in d["summary"].items()]


def _video_render(d: Dict[str, Any]) -> List[str]:
    return [f"{c['task']} {c['height']}x{c['width']}: {_fmt(c['ms_per_step']['physics_render'])} -> "
            f"{_fmt(c['ms_per_step']['recorder'])} ms per recorded step ({_fmt(c['speedup'], 2)}x); "
            f"{_fmt(100 * c['frame_share_off_by_8'], 2)}% of pixels differ by more than 8"
            for c in d["cases"]]


def _scale_check(d: Dict[str, Any]) -> List[str]:
    scale, starved = d["scale"], d["starved"]
    return [f"{d['env']}, {scale['label_a']} vs {scale['label_b']}, {len(scale['areas_a'])} seeds each: "
            f"{scale['verdict']} (difference {scale['difference']:+.1f}, interval [{scale['low']:+.1f}, "
            f"{scale['high']:+.1f}], margin ±{scale['margin']:.1f})",
            f"starved learner ({starved['label_b']}): {starved['verdict']} (difference "
            f"{starved['difference']:+.1f}, interval [{starved['low']:+.1f}, {starved['high']:+.1f}])"]


def _pbt_vs_grid(d: Dict[str, Any]) -> List[str]:
    return [f"{name} ({len(d[name]['trials'])} trials, {d['settings']['max_actor_steps']:,} env steps each): "
            f"best final return {_fmt(d[name]['best_final'])}, median final {_fmt(d[name]['median_final'])}, "
            f"median mean return along the curve {_fmt(d[name]['median_auc'])}"
            + (f"; {len(d['pbt']['lineage'])} exploits" if name == "pbt" else "") for name in ("pbt", "grid")]


def _calibration(d: Dict[str, Any]) -> List[str]:
    rows = d.get("rows", [])
    if not rows:
        return []
    worst = max(abs(r["predicted"]["env_steps_per_s"] / r["measured"]["env_steps_per_s"] - 1) for r in rows)
    within = sum(all(r["within_25pct"].values()) for r in rows)
    return [f"{len(rows)} runs (paths: {', '.join(sorted({r['path'] for r in rows}))}; caps "
            f"{', '.join(str(c) for c in sorted({r['cap_mbit'] for r in rows}, reverse=True))} Mbit/s); "
            f"fitted share {_fmt(d['share'])}; {within}/{len(rows)} within 25% on env steps/s, lag and bytes; "
            f"largest env steps/s error {worst:.0%}",
            "table: [results/scaling.md](results/scaling.md), Calibration"]


def _startup(d: Dict[str, Any]) -> List[str]:
    ms = d["milestones_s"]
    lines = ["median seconds from launch: " + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in ms.items())]
    if d.get("floor_s"):
        lines.append(f"learner's path floor {d['floor_total_s']:.1f} s: "
                     + "; ".join(f"{k} {v:.2f}" for k, v in d["floor_s"].items()))
    if d.get("cpu_floor_s") is not None:
        by_role = sorted(d["cpu_to_first_learner_step_s"].items(), key=lambda kv: -kv[1])
        lines.append(f"CPU floor {d['cpu_floor_s']:.1f} s: {d['cpu_total_s']:.1f} CPU-s of every process to the "
                     f"first learner step over {d['cores']} cores ("
                     + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in by_role) + ")")
    lines.append(f"issue 31's target for the first learner step: {d['target_first_learner_step_s']:g} s")
    if d.get("baseline"):
        base = d["baseline"]
        lines.append(f"baseline {(base['git_sha'] or '')[:7]}, run alternately: " + ", ".join(
            f"{k.replace('_', ' ')} {v:.1f}" for k, v in base["milestones_s"].items())
            + f"; its first learner step later in {base['rounds_this_faster']} of "
            f"{len(base['first_learner_step_gaps_s'])} rounds")
    return lines


# bench module -> (result JSON, headline extractor). A bench without a result
# yet is listed with "no result yet".
BENCHES: Dict[str, tuple] = {
    "d4pg_learning": ("d4pg_learning.json", _learning),
    "impala_learning": ("impala_learning.json", _learning),
    "d4pg_suite": ("d4pg_suite.json", _suite),
    "crash_torture": ("crash_torture.json", _torture),
    "d4pg_throughput": ("d4pg_throughput.json", _throughput_d4pg),
    "impala_throughput": ("impala_throughput.json", _throughput_impala),
    "d4pg_pull_rate": ("d4pg_pull_rate.json", _pull_rate),
    "replay_packing": ("replay_packing.json", _replay_packing),
    "replication": ("replication.json", _replication),
    "soak": ("soak.json", _soak),
    "learner_roofline": ("learner_roofline.json", _roofline),
    "replay_capacity": ("replay_capacity.json", _replay_capacity),
    "scaling": ("scaling.json", _scaling),
    "scaling_calibration": ("scaling_calibration.json", _calibration),
    "startup": ("startup.json", _startup),
    "envpool_eval": ("envpool_eval.json", _envpool),
    "bc_rollout_noise": ("bc_rollout_noise.json", _bc_noise),
    "scale_check": ("scale_check.json", _scale_check),
    "pbt_vs_grid": ("pbt_vs_grid.json", _pbt_vs_grid),
    "video_render": ("video_render.json", _video_render),
}


def _summary_line(module: str) -> str:
    with open(os.path.join(HERE, f"{module}.py"), encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return doc.strip().splitlines()[0] if doc.strip() else "(no docstring)"


def _machine(d: Dict[str, Any]) -> str:
    m = d.get("machine")
    if not isinstance(m, dict):
        return "not recorded"
    return f"{m.get('cpu_model', '?')}, {m.get('cpus', '?')} cores" + (", AVX-512" if m.get("avx512") else "")


def render() -> str:
    """The whole page, from the benches' docstrings and ``bench/results/*.json``."""
    out = ["# Benchmarks", "",
           "Generated by `python bench/bench_index.py` from each bench's docstring and its JSON in "
           "`bench/results/`; do not edit by hand. Throughput figures depend on the machine "
           "(recorded where the bench records it) and on its load: compare ratios measured in one run.",
           ""]
    for module, (result, extract) in BENCHES.items():
        out += [f"## `{module}`", "", _summary_line(module), ""]
        path = os.path.join(RESULTS, result)
        if not os.path.exists(path):
            out += ["No result yet.", ""]
            continue
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        command: Optional[str] = data.get("command") if isinstance(data.get("command"), str) else None
        out.append(f"- run: `{command or f'python bench/{module}.py'}`")
        out += [f"- {line}" for line in extract(data)]
        out.append(f"- machine: {_machine(data)}")
        png = os.path.splitext(result)[0] + ".png"
        stem = os.path.splitext(result)[0]
        plots = [png] if os.path.exists(os.path.join(RESULTS, png)) else []
        plots += sorted(n for n in os.listdir(RESULTS) if n.startswith(stem + "_") and n.endswith(".png"))
        if plots:
            out.append("- plot: " + ", ".join(f"[results/{n}](results/{n})" for n in plots))
        out.append("")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if bench/README.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = open(INDEX, encoding="utf-8").read() if os.path.exists(INDEX) else ""
        if current != text:
            print("bench/README.md is stale: run python bench/bench_index.py", file=sys.stderr)
            return 1
        return 0
    with open(INDEX, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {INDEX}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
