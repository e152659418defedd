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
            "rlplat learner worker": 0.5, startup.FIRST_CALL_PARTS["build_s"]: 1.0,
            startup.FIRST_CALL_PARTS["first_call_s"]: first_call}


def test_the_floor_takes_the_first_call_or_the_warm_up_whichever_is_longer():
    runs = [dict(_run("this", r, 12.0), env_steps_per_s=500.0, min_replay_size=1000) for r in range(3)]
    # Warm-up: 1000 env steps at 500/s = 2 s; the first call takes 2.5 s, so it is the one on the path.
    slow_call = startup.report(_parts(2.5), runs)
    assert slow_call["floor_s"]["learner's first call (replay warm-up beside it)"] == pytest.approx(2.5)
    assert slow_call["floor_total_s"] == pytest.approx(2.1 + 3.6 + 1.0 + 2.5)
    fast_call = startup.report(_parts(1.5), runs)
    assert fast_call["floor_s"]["replay warm-up: 1000 env steps at 500/s"] == pytest.approx(2.0)
    assert fast_call["floor_total_s"] == pytest.approx(2.1 + 3.6 + 1.0 + 2.0)


def test_the_cpu_floor_is_the_median_total_cpu_over_the_cores(monkeypatch):
    monkeypatch.setattr(startup.os, "cpu_count", lambda: 2)
    cpu = [{"learner": 9.0, "driver": 3.0, "actors": 4.0}, {"learner": 10.0, "driver": 3.0, "actors": 5.0},
           {"learner": 8.0, "driver": 2.0, "actors": 2.0}]
    runs = [dict(_run("this", r, 12.0), env_steps_per_s=500.0, min_replay_size=1000,
                 cpu_to_first_learner_step_s=c) for r, c in enumerate(cpu)]
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
