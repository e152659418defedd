"""Fast tests of the Ray layer's pure parts, and of connecting to nothing."""

import io
import time

import portpicker
import pytest

from rlplat.distributed import actor_slots
from rlplat.distributed import cluster
from rlplat.distributed import counters
from rlplat import runners
from rlplat.distributed import progress
from rlplat.distributed import resources
from rlplat import seeding


def test_connect_to_an_unreachable_address_fails_fast_with_the_fix():
    port = portpicker.pick_unused_port()  # nothing listens there
    start = time.monotonic()
    with pytest.raises(cluster.ClusterConnectionError) as info:
        cluster.connect(f"127.0.0.1:{port}", timeout_s=30)
    assert time.monotonic() - start < 15
    message = str(info.value)
    assert "\n" not in message
    assert f"could not reach Ray at 127.0.0.1:{port}" in message
    assert "ray start --head" in message and "drop --address" in message


@pytest.mark.parametrize("address", ["nonsense", "host:", ":6379", "host:99999"])
def test_malformed_addresses_are_one_line_value_errors(address):
    with pytest.raises(ValueError, match="--address must be 'auto' or HOST:PORT"):
        cluster.connect(address)


def test_actor_seeds_are_distinct_and_deterministic():
    seeds = [seeding.actor_seed(7, i) for i in range(64)]
    assert len(set(seeds)) == 64
    assert seeds == [seeding.actor_seed(7, i) for i in range(64)]
    assert all(0 <= s < 2**31 for s in seeds)
    # Neighbouring global seeds do not share actor seeds (unlike seed + index).
    assert not set(seeds) & {seeding.actor_seed(8, i) for i in range(64)}
    assert seeding.role_seed(7, "evaluator") not in seeds
    with pytest.raises(ValueError, match="unknown role"):
        seeding.role_seed(7, "critic")


def test_a_restarted_actor_gets_a_fresh_but_valid_seed():
    seed = seeding.actor_seed(7, 0)
    restarted = [seeding.restart_seed(seed, pid) for pid in (1234, 1235, 99999)]
    assert seed not in restarted and len(set(restarted)) == 3
    assert all(0 <= s < 2**31 for s in restarted)
    assert restarted[0] == seeding.restart_seed(seed, 1234)


def test_resource_plan_fits_two_actors_and_a_learner_on_two_cores():
    plan = resources.plan_resources(2, 0, num_actors=2, num_learner_replicas=1)
    assert plan.learner_cpus == 1 and plan.actor_cpus == 0.5 and plan.learner_gpus == 0
    assert plan.learner_cpus + 2 * plan.actor_cpus + plan.evaluator_cpus + plan.replay_cpus <= 2
    gpu = resources.plan_resources(16, 2, num_actors=8, num_learner_replicas=2)
    assert gpu.learner_gpus == 2 and gpu.learner_cpus == 1 and gpu.actor_cpus == 1
    with pytest.raises(ValueError, match="num_learner_replicas 2 or fewer"):
        resources.plan_resources(16, 2, num_actors=8, num_learner_replicas=4)
    with pytest.raises(ValueError, match="num_actors"):
        resources.plan_resources(2, 0, num_actors=100, num_learner_replicas=1)


def test_status_line_and_rates():
    meter = progress.RateMeter(window_s=10)
    meter.update(0, now=0.0)
    meter.update(500, now=2.0)
    assert meter.rate() == 250
    line = progress.format_status(
        actor_steps=12000, max_actor_steps=100000, learner_steps=350, env_steps_per_s=381.2,
        learner_steps_per_s=11.04, eval_return=None, eval_version=None, replay_size=12000,
        samples_per_insert=31.9, policy_version=340, policy_lag=10.0)
    for part in ("actor 12,000/100,000", "learner 350", "eval -", "env 381/s", "learn 11.0/s",
                 "replay 12,000", "spi 31.9", "policy v340 lag 10",
                 "eta 3m51s"):  # (100,000 - 12,000) / 381.2 = 230.8 s
        assert part in line
    unbounded = progress.format_status(
        actor_steps=12000, max_actor_steps=None, learner_steps=350, env_steps_per_s=381.2,
        learner_steps_per_s=11.04, eval_return=None, eval_version=None, replay_size=12000,
        samples_per_insert=31.9, policy_version=340, policy_lag=10.0)
    assert "eta" not in unbounded  # no end known, no ETA
    assert [progress.format_duration(s) for s in (0.4, 59, 75, 3599, 3725, 90000)] == [
        "0s", "59s", "1m15s", "59m59s", "1h02m", "25h00m"]
    out = io.StringIO()  # not a terminal: one line per update
    console = progress.ConsoleLine(True, out)
    console.show("a")
    console.show("b")
    assert out.getvalue() == "a\nb\n"


def test_counters_follow_checkpoints(tmp_path):
    logdir = str(tmp_path)
    counters.save_counters(logdir, 100, {"actor_steps": 3000})
    counters.save_counters(logdir, 200, {"actor_steps": 6000})
    assert counters.load_counters(logdir, 200) == {"actor_steps": 6000}
    # A checkpoint whose counters were never written falls back to the newest older entry.
    assert counters.load_counters(logdir, 150) == {"actor_steps": 3000}
    assert counters.load_counters(logdir, 50) == {}


def test_layout_config_is_validated():
    with pytest.raises(ValueError, match="actor_chunk_steps"):
        runners.RayLayoutConfig(actor_chunk_steps=0)
    with pytest.raises(ValueError, match="stop_timeout_s"):
        runners.RayLayoutConfig(stop_timeout_s=0)


def test_restart_budget_counts_restarts_per_window_not_per_lifetime():
    budget = actor_slots.RestartBudget(max_restarts=2, window_s=60)
    assert budget.record(0) and budget.record(10)
    assert not budget.record(20)  # a third within a minute: a crash loop
    # A long run: one crash every 40 s forever is never more than 2 per minute.
    steady = actor_slots.RestartBudget(max_restarts=2, window_s=60)
    assert all(steady.record(40.0 * i) for i in range(100))
    assert steady.recent(4000.0) == 1 and steady.recent(4100.0) == 0
    assert not actor_slots.RestartBudget(max_restarts=0, window_s=60).record(0)
    with pytest.raises(ValueError, match="window_s must be > 0"):
        actor_slots.RestartBudget(1, 0)


def test_restart_knobs_and_stop_event_are_validated():
    with pytest.raises(ValueError, match="actor_max_restarts must be >= 0"):
        runners.RayLayoutConfig(actor_max_restarts=-1)
    with pytest.raises(ValueError, match="actor_restart_window_s must be > 0"):
        runners.RayLayoutConfig(actor_restart_window_s=0)
    with pytest.raises(ValueError, match="stop_event must be a threading.Event") as info:
        runners.run_on_ray(runners.Experiment(None, "cartpole:swingup"), stop_event=True)
    assert "\n" not in str(info.value)


def test_only_a_learner_gets_jemalloc_after_what_is_preloaded_and_the_opt_out_removes_it(monkeypatch):
    from rlplat.distributed import process  # pylint: disable=g-import-not-at-top

    path = process.jemalloc_path()
    assert path and path.endswith("ray/core/libjemalloc.so"), path  # Ray ships it; setup installs Ray
    monkeypatch.delenv(process.ALLOCATOR_VARIABLE, raising=False)
    learner = process.runtime_env("learner")["env_vars"]
    assert learner["LD_PRELOAD"] == "${LD_PRELOAD} " + path
    for role in ("actor", "evaluator", "replay", "learner-group"):
        assert "LD_PRELOAD" not in process.runtime_env(role)["env_vars"], role
    monkeypatch.setenv(process.ALLOCATOR_VARIABLE, "system")
    assert "LD_PRELOAD" not in process.runtime_env("learner")["env_vars"]


@pytest.mark.multiprocess
def test_a_worker_imports_tensorflow_without_setuptools_and_a_set_choice_is_kept(monkeypatch):
    """TensorFlow's ``import distutils`` loads setuptools and pkg_resources under setuptools' default shim."""
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top

    from rlplat.distributed import process  # pylint: disable=g-import-not-at-top

    monkeypatch.delenv(process.DISTUTILS_VARIABLE, raising=False)
    probe = "import sys, tensorflow; print(*(name in sys.modules for name in ('setuptools', 'pkg_resources')))"
    done = subprocess.run([sys.executable, "-c", probe], env=process.subprocess_env("learner"),
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr[-2000:]
    monkeypatch.setenv(process.DISTUTILS_VARIABLE, "local")
    for role in ("actor", "evaluator", "replay", "learner"):
        assert process.runtime_env(role)["env_vars"][process.DISTUTILS_VARIABLE] == "local", role


def test_expand_fills_variables_like_ray_and_empties_unset_ones():
    from rlplat.distributed import process  # pylint: disable=g-import-not-at-top

    env = {"LD_PRELOAD": "${LD_PRELOAD} /lib/j.so", "A": "${B}:${UNSET_X}:x", "C": "plain"}
    assert process.expand(env, {"LD_PRELOAD": "/shim.so", "B": "b"}) == {
        "LD_PRELOAD": "/shim.so /lib/j.so", "A": "b::x", "C": "plain"}
    assert process.expand(env, {})["LD_PRELOAD"] == "/lib/j.so"
