"""Placement on a real three-node Ray cluster: actors on actor nodes, learner + replay on the head.

scripts/multinode_cluster.sh starts a head (``{"learner": 2}``, 3 CPUs) and two
workers (``{"actor": 1}``, 1 CPU each), each in its own network namespace with
its own address, token authentication on. ``rlplat train d4pg --address``
runs a short D4PG on it as a driver on the head; afterwards Ray's state API
(``ray.util.state``, through the head's dashboard) says where every worker
ran. The head has CPUs to spare for both actors, so they reach the workers
only because they ask for ``actor``: without placement this test fails.

A second run on the same cluster uses ``--num-learner-workers 2``: the head's
two ``learner`` units hold both learner workers (MultiWorkerMirroredStrategy
between two processes), and the group actor and replay sit next to the chief.
"""

import datetime
import json
import os

import pytest
from namespace_cluster import CLUSTER_MARKS, HEAD, W1, W2
from namespace_cluster import script as _script

DASHBOARD = f"http://{HEAD}:8266"
MAX_ACTOR_STEPS = 2000
GROUP_ACTOR_STEPS = 1200
NUM_ACTORS = 2


pytestmark = [
    pytest.mark.usefixtures("loopback_cluster_turn"),  # one fake cluster on the machine at a time
    *CLUSTER_MARKS,
]

# Runs on the head after the training run: every node, and every actor the
# run created (dead by now; the GCS keeps their records).
_STATE_QUERY = f"""
import datetime
import json
from ray.util.state import list_actors, list_nodes
nodes = list_nodes(address={DASHBOARD!r}, timeout=30)
actors = list_actors(address={DASHBOARD!r}, timeout=30, limit=1000, detail=True)
print(json.dumps({{
    "nodes": [{{"node_id": n.node_id, "ip": n.node_ip, "state": n.state,
                "resources": n.resources_total}} for n in nodes],
    "actors": [{{"class_name": a.class_name, "node_id": a.node_id, "state": a.state,
                 "pid": a.pid, "actor_id": a.actor_id}} for a in actors],
}}))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = str(tmp_path_factory.mktemp("multinode") / "cluster")
    up = _script("up", state, "--head-resources", '{"learner": 2}', timeout=200)
    try:
        assert up.returncode == 0, f"cluster did not start: {up.stderr.strip()[-2000:]}"
        assert up.stdout.strip() == f"{HEAD}:6391"
        yield state
    finally:
        _script("down", state, timeout=90)  # a no-op once test_down_leaves_nothing ran


def _train_and_query(cluster, logdir, max_actor_steps, *extra):
    """Trains on the cluster from the head; returns stdout, Ray's state and run_info."""
    command = ["rlplat", "train", "d4pg", "--address", f"{HEAD}:6391", "--env", "cartpole:swingup",
               "--num-actors", str(NUM_ACTORS), "--max-actor-steps", str(max_actor_steps),
               "--logdir", logdir, "--seed", "3",
               "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32",
               "--global-batch-size", "32", "--min-replay-size", "200", "--samples-per-insert", "4",
               "--max-replay-size", "10000", *extra]
    run = _script("exec", cluster, "head", "--", *command, timeout=400)
    assert run.returncode == 0, (f"training failed (exit {run.returncode}):\n"
                                 f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    query = _script("exec", cluster, "head", "--", "python", "-c", _STATE_QUERY, timeout=120)
    assert query.returncode == 0, query.stderr[-3000:]
    state = json.loads(query.stdout.strip().splitlines()[-1])
    with open(os.path.join(logdir, "run_info.json"), encoding="utf-8") as f:
        run_info = json.load(f)
    return {"stdout": run.stdout, "state": state, "run_info": run_info}


@pytest.fixture(scope="module")
def trained(cluster, tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("multinode") / "run")
    return _train_and_query(cluster, logdir, MAX_ACTOR_STEPS)


@pytest.fixture(scope="module")
def trained_group(cluster, trained, tmp_path_factory):
    """The second run, with two learner workers; ``state`` holds only this run's actors."""
    seen = {a["actor_id"] for a in trained["state"]["actors"]}
    logdir = str(tmp_path_factory.mktemp("multinode") / "group_run")
    out = _train_and_query(cluster, logdir, GROUP_ACTOR_STEPS, "--num-learner-workers", "2")
    out["state"]["actors"] = [a for a in out["state"]["actors"] if a["actor_id"] not in seen]
    return out


def _node_ips(state):
    return {n["node_id"]: n["ip"] for n in state["nodes"]}


def _where(state, class_name):
    ips = _node_ips(state)
    return [ips.get(a["node_id"]) for a in state["actors"] if a["class_name"] == class_name]


def test_cluster_has_three_nodes_with_role_resources(trained):
    nodes = {n["ip"]: n for n in trained["state"]["nodes"]}
    assert set(nodes) == {HEAD, W1, W2}
    assert all(n["state"] == "ALIVE" for n in nodes.values())
    assert nodes[HEAD]["resources"].get("learner") == 2
    assert nodes[W1]["resources"].get("actor") == nodes[W2]["resources"].get("actor") == 1
    assert "actor" not in nodes[HEAD]["resources"]


def test_run_finished_its_steps(trained):
    done = [line for line in trained["stdout"].splitlines() if line.startswith("done:")]
    assert done, trained["stdout"][-2000:]
    actor_steps = int(done[-1].split()[1].replace(",", ""))
    assert actor_steps >= MAX_ACTOR_STEPS


def test_actors_ran_on_the_worker_nodes(trained):
    # One `actor` unit per worker and one per actor: one actor on each worker.
    assert sorted(_where(trained["state"], "ActorWorker")) == [W1, W2]


def test_learner_and_replay_ran_on_the_head(trained):
    assert _where(trained["state"], "LearnerWorker") == [HEAD]
    assert _where(trained["state"], "ReplayServer") == [HEAD]


def test_driver_reported_the_same_placement(trained):
    """The placement the driver printed and stored in run_info.json matches Ray's records."""
    placement = trained["run_info"]["node_placement"]
    ips = _node_ips(trained["state"])
    by_class = {"LearnerWorker": ["learner"], "ReplayServer": ["replay"],
                "ActorWorker": [f"actor {i}" for i in range(NUM_ACTORS)]}
    for class_name, names in by_class.items():
        recorded = sorted(placement[name]["node_id"] for name in names)
        from_ray = sorted(a["node_id"] for a in trained["state"]["actors"] if a["class_name"] == class_name)
        assert recorded == from_ray, class_name
        assert all(placement[name]["node_ip"] == ips[placement[name]["node_id"]] for name in names)
    assert placement["learner"]["custom_resources"] == {"learner": 2.0}
    assert "placement: learner, replay" in trained["stdout"]


def test_group_run_finished_with_two_learner_workers(trained_group):
    done = [line for line in trained_group["stdout"].splitlines() if line.startswith("done:")]
    assert done, trained_group["stdout"][-2000:]
    assert int(done[-1].split()[1].replace(",", "")) >= GROUP_ACTOR_STEPS
    assert "in 2 learner workers" in trained_group["stdout"]


def test_both_learner_workers_ran_on_the_learner_node_and_actors_on_actor_nodes(trained_group):
    state = trained_group["state"]
    # Two learner processes, both holding a `learner` unit: the head is the only node with any.
    assert _where(state, "GroupLearnerWorker") == [HEAD, HEAD]
    # The group actor (0 CPUs, it forwards weight pulls to the chief) and replay sit with the chief.
    assert _where(state, "LearnerGroup") == [HEAD]
    assert _where(state, "ReplayServer") == [HEAD]
    assert _where(state, "LearnerWorker") == []  # no single-process learner in this run
    assert sorted(_where(state, "ActorWorker")) == [W1, W2]


def test_driver_reported_each_learner_worker(trained_group):
    placement = trained_group["run_info"]["node_placement"]
    state = trained_group["state"]
    members = [placement[f"learner worker {i}"] for i in range(2)]
    assert [(m["worker_index"], m["is_chief"]) for m in members] == [(0, True), (1, False)]
    from_ray = sorted((a["node_id"], a["pid"]) for a in state["actors"]
                      if a["class_name"] == "GroupLearnerWorker")
    assert sorted((m["node_id"], m["pid"]) for m in members) == from_ray
    assert all(m["node_ip"] == HEAD and m["custom_resources"] == {"learner": 2.0} for m in members)
    assert "learner" not in placement and placement["learner group"]["node_ip"] == HEAD
    assert f"placement: learner worker 0 (chief) on {HEAD}" in trained_group["stdout"]
    assert f"placement: learner worker 1 on {HEAD}" in trained_group["stdout"]


@pytest.fixture(scope="module")
def swept(cluster, trained_group, tmp_path_factory):
    """`rlplat sweep` on the cluster: two trials, each with its own learner (head) and actor (a worker)."""
    del trained_group  # after the group run: the cluster holds one run at a time until here
    sweep_dir = str(tmp_path_factory.mktemp("multinode") / "sweep")
    command = ["rlplat", "sweep", "d4pg", "--address", f"{HEAD}:6391", "--env", "cartpole:swingup",
               "--num-actors", "1", "--max-actor-steps", "1200", "--seed", "3", "--grid", "sigma=0.2,0.4",
               "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32", "--global-batch-size", "32",
               "--min-replay-size", "200", "--samples-per-insert", "4", "--max-replay-size", "10000",
               "--eval-every-steps", "600", "--eval-episodes", "1", "--actor-cpus", "0.5",
               "--learner-cpus", "0.5", "--logdir", sweep_dir]
    run = _script("exec", cluster, "head", "--", *command, timeout=500)
    assert run.returncode == 0, f"sweep failed (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return sweep_dir, run.stdout


def test_sweep_trials_ran_concurrently_on_the_cluster_each_with_its_own_workers(swept):
    sweep_dir, stdout = swept
    assert "2 trial(s)" in stdout and "summary:" in stdout
    spans, pids = [], []
    for name in ("sigma=0.2,seed3", "sigma=0.4,seed3"):
        with open(os.path.join(sweep_dir, name, "run_info.json"), encoding="utf-8") as f:
            placement = json.load(f)["node_placement"]
        assert placement["learner"]["node_ip"] == HEAD
        assert placement["actor 0"]["node_ip"] in (W1, W2)
        pids.append({(p["node_ip"], p["pid"]) for p in placement.values()})
        # A trial's life: from its driver's start (run_info) to its last record. Its
        # first record comes only after start-up, and a fast 1200-step trial can
        # log for 2 s, so records alone need not overlap even when both ran at once.
        with open(os.path.join(sweep_dir, name, "run_info.json"), encoding="utf-8") as f:
            started = datetime.datetime.fromisoformat(json.load(f)["started"]).timestamp()
        times = []
        with open(os.path.join(sweep_dir, name, "metrics.jsonl"), encoding="utf-8") as f:
            for line in f:
                times.append(json.loads(line)["wall_time"])
        spans.append((started, max(times)))
    assert not pids[0] & pids[1]
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1, "the trials did not run at the same time"


def test_down_leaves_nothing(cluster, trained, trained_group, swept):
    del trained, trained_group, swept  # runs last: the cluster is needed until the queries are done
    down = _script("down", cluster, timeout=90)
    assert down.returncode == 0, down.stderr
    assert "no processes left" in down.stdout
