"""Weights cross each node's link once per version, not once per actor: measured on a real three-node cluster.

scripts/multinode_cluster.sh starts a head (``learner``) and two workers that
take two actors each; every node has its own network namespace, so the bytes
a worker node receives are its ``eth0``'s ``rx_bytes``. D4PG runs twice with
a policy of about 1 MiB per version, published every ``PUBLISH_PERIOD``
learner steps:

- per node (the default): Ray moves each version to a node once, and the two
  actors there read the same copy. The node receives at most one copy per
  published version (plus Ray's and Reverb's own traffic), although its two
  actors adopted, together, well over that many versions;
- ``--weight-relay``: one relay process per worker node fetches each
  version and puts it in the node's shared memory, where both actors read
  it: again at most one copy per published version reaches the node, and
  the actors make no weight call over Ray after their first;
- ``--weights-per-actor``: each actor pulls every version it adopts over
  Ray, and the node receives at least one copy per actor per adoption.
"""

import json
import os

import pytest

from namespace_cluster import CLUSTER_MARKS, HEAD, W1, W2
from namespace_cluster import script as _script

PUBLISH_PERIOD = 20
# Ray's heartbeats and task calls, Reverb's answers, the run's records: what a worker node
# receives besides weights in one of these runs (seen: about 0.3 MiB).
OTHER_TRAFFIC = 4 * 2**20

pytestmark = [
    pytest.mark.usefixtures("loopback_cluster_turn"),  # one fake cluster on the machine at a time
    *CLUSTER_MARKS,
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = str(tmp_path_factory.mktemp("multinode_weights") / "cluster")
    up = _script("up", state, "--head-resources", '{"learner": 1}', "--worker-cpus", "2",
                 "--worker-resources", '{"actor": 2}', timeout=200)
    try:
        assert up.returncode == 0, f"cluster did not start: {up.stderr.strip()[-2000:]}"
        yield state
    finally:
        _script("down", state, timeout=90)


def _rx_bytes(state):
    out = {}
    for node, ip in (("w1", W1), ("w2", W2)):
        # /proc/net/dev shows the reading process's network namespace (/sys/class/net, the mounting one's).
        read = _script("exec", state, node, "--", "cat", "/proc/net/dev", timeout=60)
        assert read.returncode == 0, read.stderr[-2000:]
        line = next(x for x in read.stdout.splitlines() if x.strip().startswith("eth0:"))
        out[ip] = int(line.split(":", 1)[1].split()[0])  # the first field: bytes received
    return out


def _records(logdir, role):
    with open(os.path.join(logdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r.get("role") == role]


def _run(state, logdir, *extra):
    before = _rx_bytes(state)
    command = ["rlplat", "train", "d4pg", "--address", f"{HEAD}:6391", "--env", "cartpole:swingup",
               "--num-actors", "4", "--actor-cpus", "0.5", "--max-actor-steps", "8000", "--logdir", logdir,
               "--seed", "1", "--policy-layer-sizes", "512,512", "--critic-layer-sizes", "32,32",
               "--global-batch-size", "32", "--min-replay-size", "200", "--samples-per-insert", "4",
               "--max-replay-size", "10000", "--eval-every-steps", "8000", "--eval-episodes", "1",
               "--weight-publish-period", str(PUBLISH_PERIOD), *extra]
    run = _script("exec", state, "head", "--", *command, timeout=400)
    assert run.returncode == 0, f"training failed (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    after = _rx_bytes(state)
    with open(os.path.join(logdir, "run_info.json"), encoding="utf-8") as f:
        placement = json.load(f)["node_placement"]
    learner = [r for r in _records(logdir, "learner") if "weight_versions_published" in r][-1]
    pulls, shared_reads = {}, {}
    for r in _records(logdir, "actor"):
        if r.get("weight_pulls") is not None:
            pulls[r["actor_index"]] = r["weight_pulls"]  # the last record: the total
            shared_reads[r["actor_index"]] = r.get("shared_weight_reads") or 0
    per_node = {}
    for ip in (W1, W2):
        indices = [i for i in range(4) if placement[f"actor {i}"]["node_ip"] == ip]
        per_node[ip] = {"rx": after[ip] - before[ip], "actors": indices,
                        "pulls": [pulls[i] for i in indices], "shared_reads": [shared_reads[i] for i in indices]}
    return {"nodes": per_node, "published": learner["weight_versions_published"],
            "version_bytes": learner["weight_version_bytes"], "stdout": run.stdout}


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    base = tmp_path_factory.mktemp("multinode_weights")
    out = {"per_node": _run(cluster, str(base / "per_node")),
           "relay": _run(cluster, str(base / "relay"), "--weight-relay"),
           "per_actor": _run(cluster, str(base / "per_actor"), "--weights-per-actor")}
    for name, run in out.items():
        print(f"\n{name}: {run['published']} versions of {run['version_bytes']:,} B published; "
              + "; ".join(f"{ip}: {n['rx'] / 2**20:.1f} MiB received, actor pulls {n['pulls']}"
                          for ip, n in run["nodes"].items()))
    return out


def test_two_actors_ran_on_each_worker_node(runs):
    for run in runs.values():
        assert [len(n["actors"]) for n in run["nodes"].values()] == [2, 2]
        assert run["version_bytes"] > 10**6  # weights dominate what a node receives


@pytest.mark.parametrize("path", ["per_node", "relay"])
def test_per_node_a_version_crosses_each_link_once(runs, path):
    run = runs[path]
    size = run["version_bytes"]
    for ip, node in run["nodes"].items():
        # The node's actors adopted this many versions between them: per actor, they would all cross.
        assert sum(node["pulls"]) * size > 1.5 * (run["published"] * size + OTHER_TRAFFIC), node
        # At most one copy of each published version arrived, besides each actor's first pull (over Ray,
        # before it knows where the policy lives), ...
        assert node["rx"] <= (run["published"] + len(node["actors"])) * size + OTHER_TRAFFIC, (ip, node)
        # ... and at least one of each version an actor there adopted.
        assert node["rx"] >= max(node["pulls"]) * size, (ip, node)


def test_with_a_relay_the_actors_read_their_nodes_shared_memory(runs):
    for ip, node in runs["relay"]["nodes"].items():
        # Every adoption after the first came from the relay's block: many reads, no pull over Ray.
        assert all(reads > pulls > 1 for reads, pulls in zip(node["shared_reads"], node["pulls"])), (ip, node)


def test_per_actor_every_adopted_version_crosses_the_link(runs):
    run = runs["per_actor"]
    size = run["version_bytes"]
    for ip, node in run["nodes"].items():
        assert node["rx"] >= sum(node["pulls"]) * size, (ip, node)
