"""bench/startup.py's before/after report: medians per tree and the per-round gaps of the first learner step."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import startup  # noqa: E402


def _run(tree, rnd, first_learner_step):
    steps = {m: first_learner_step * (k + 1) / len(startup.MILESTONES) for k, m in enumerate(startup.MILESTONES)}
    return {"tree": tree, "round": rnd, "startup_s": steps, "git_sha": "abc1234" if tree == "baseline" else "new"}


def test_the_baseline_gets_its_medians_and_the_gap_of_each_round():
    runs = [_run("this", 0, 10.0), _run("baseline", 0, 13.0), _run("baseline", 1, 11.0), _run("this", 1, 12.0),
            _run("this", 2, 9.0), _run("baseline", 2, 15.0)]
    base = startup.baseline_report(runs)
    assert base["git_sha"] == "abc1234"
    assert base["first_learner_step_gaps_s"] == pytest.approx([3.0, -1.0, 6.0])
    assert base["rounds_this_faster"] == 2
    assert base["milestones_s"]["first_learner_step"] == pytest.approx(13.0)  # median of 13, 11, 15
    assert startup.baseline_report([_run("this", 0, 10.0)]) is None


def _parts(first_call):
    return {"python alone": 0.1, "local ray start (cluster.connect)": 2.0, "tensorflow + reverb": 3.0,
            "rlplat learner worker": 0.5, startup.FIRST_CALL_PARTS["build_s"]: 0.4,
            startup.FIRST_CALL_PARTS["first_call_s"]: first_call, startup.FIRST_CALL_PARTS["trace_s"]: 1.4,
            startup.FIRST_CALL_PARTS["first_run_s"]: first_call - 1.4}


def test_the_path_floor_takes_each_step_at_the_runs_cpu_or_alone_whichever_is_less():
    cpu = [{"boot": 1.0, "tensorflow_import": 2.5, "build": 0.5, "first_step_trace": 1.6},
           {"boot": 1.2, "tensorflow_import": 2.7, "build": 0.7, "first_step_trace": 1.8},
           {"boot": 0.8, "tensorflow_import": 2.6, "build": 0.6, "first_step_trace": 1.2}]
    traced = [11.5, 11.0, 11.4]  # the first step (12.0) came 0.5, 1.0 and 0.6 s after the trace's end
    runs = [dict(_run("this", r, 12.0), learner_startup_s={"process_started": 2.0 + 0.2 * r,
                                                          "first_step_traced": traced[r]},
                 learner_startup_cpu_s=c) for r, c in enumerate(cpu)]
    result = startup.report(_parts(2.2), runs)
    # Medians: process started 2.2, boot 1.0, import 2.6 (alone: 3.0), build 0.6 (alone: 0.4),
    # trace 1.6 (alone: 1.4); then the first run: 0.8 alone (2.2 - 1.4), 0.6 in the runs.
    assert list(result["floor_s"].values()) == pytest.approx([2.2, 1.0, 2.6, 0.4, 1.4, 0.6])
    assert result["floor_total_s"] == pytest.approx(8.2)
    assert result["first_learner_step_over_floor"] == pytest.approx(12.0 / 8.2)
    # Alone, the first run was the shorter: that one counts.
    assert startup.report(_parts(1.9), runs)["floor_s"][startup.FIRST_RUN] == pytest.approx(0.5)
    # Runs that recorded no CPU-seconds (an older tree's) give no floor.
    old = startup.report(_parts(2.2), [dict(r, learner_startup_cpu_s=None) for r in runs])
    assert old["floor_s"] is None and old["floor_total_s"] is None


def test_the_cpu_floor_is_the_median_total_cpu_over_the_cores(monkeypatch):
    monkeypatch.setattr(startup.os, "cpu_count", lambda: 2)
    cpu = [{"learner": 9.0, "driver": 3.0, "actors": 4.0}, {"learner": 10.0, "driver": 3.0, "actors": 5.0},
           {"learner": 8.0, "driver": 2.0, "actors": 2.0}]
    runs = [dict(_run("this", r, 12.0), cpu_to_first_learner_step_s=c) for r, c in enumerate(cpu)]
    result = startup.report(_parts(2.5), runs)
    assert result["cpu_total_s"] == pytest.approx(16.0)  # totals 16, 18, 12
    assert result["cpu_floor_s"] == pytest.approx(8.0)
    assert result["cpu_to_first_learner_step_s"] == pytest.approx({"learner": 9.0, "driver": 3.0, "actors": 4.0})
    assert startup.report(_parts(2.5), [dict(r, cpu_to_first_learner_step_s=None) for r in runs])["cpu_floor_s"] is None


def test_the_sampler_counts_the_cpu_of_a_child_and_of_its_child_by_role():
    import subprocess  # pylint: disable=g-import-not-at-top

    import cpu_accounting  # pylint: disable=g-import-not-at-top

    # Each burns 0.6 CPU-s, then stays alive a second so that a sample sees what it used.
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    code = f"import subprocess, sys\n{burn}subprocess.run([sys.executable, '-c', {burn + 'time.sleep(1.0)'!r}])\n"
    sampler = cpu_accounting.DescendantCpuSampler(period_s=0.05).start()
    try:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    finally:
        sampler.stop()
    # The child is the driver; its child (no Ray in its command line) is "other". (Under pytest-xdist
    # the worker may have children of its own from earlier tests: they are descendants too.)
    both = [s for s in sampler.samples if sum(cpu >= 0.55 for _, cpu in s[1].values()) >= 2]
    assert both, sampler.samples[-3:]
    by_role = sampler.by_role_at(both[-1][0])
    assert by_role["driver"] >= 0.55 and by_role["other"] >= 0.55, by_role
    assert sum(by_role.values()) == pytest.approx(sum(cpu for _, cpu in both[-1][1].values()), abs=0.02)
    assert sampler.by_role_at(sampler.samples[0][0] - 1.0) == {}  # nothing before the first sample
