"""The resource plan on multi-node clusters: custom role resources, the learner's node, fit checks.

Pure logic over ``NodeInfo`` records (what ``ray.nodes()`` reports), so every
cluster shape is cheap to test; tests/multinode runs the same plan on a real
three-node Ray cluster.
"""

import argparse

import pytest

from rlplat.distributed import layout
from rlplat.distributed import placement
from rlplat.distributed import resources
from rlplat.launch import common


def _id(i):
    """A node ID in Ray's form (28 bytes, hex)."""
    return f"{i:02x}" * 28


def _node(node_id, cpus, gpus=0, head=False, **custom):
    res = {"CPU": float(cpus), "memory": 1e9, f"node:10.0.0.{node_id}": 1.0, **custom}
    if gpus:
        res["GPU"] = float(gpus)
    if head:
        res["node:__internal_head__"] = 1.0
    return resources.NodeInfo(node_id=_id(node_id), ip=f"10.0.0.{node_id}", resources=res, is_head=head)


# The shape of clusters/*.yaml: a GPU learner head, CPU actor nodes with one `actor` unit per CPU.
CLOUD = [_node(1, 8, gpus=1, head=True, learner=1.0), _node(2, 16, actor=16.0), _node(3, 16, actor=16.0)]


def test_nodes_from_ray_keeps_live_nodes_and_finds_the_head():
    raw = [{"NodeID": "a", "Alive": True, "NodeManagerAddress": "10.0.0.1",
            "Resources": {"CPU": 2.0, "learner": 1.0, "node:__internal_head__": 1.0}},
           {"NodeID": "b", "Alive": False, "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 4.0}},
           {"NodeID": "c", "Alive": True, "NodeManagerAddress": "10.0.0.3",
            "Resources": {"CPU": 1.0, "actor": 1.0, "node:10.0.0.3": 1.0, "object_store_memory": 1e8}}]
    nodes = resources.nodes_from_ray(raw)
    assert [(n.node_id, n.is_head) for n in nodes] == [("a", True), ("c", False)]
    assert nodes[1].custom_resources() == {"actor": 1.0}


def test_cloud_cluster_uses_role_resources_by_default():
    plan = resources.plan_resources(0, 0, num_actors=32, num_learner_replicas=None, nodes=CLOUD)
    assert plan.actor_resources == {"actor": 1.0}
    assert plan.learner_resources == {"learner": 1.0}
    assert plan.learner_node_id == _id(1) and plan.learner_node_ip == "10.0.0.1"
    assert plan.learner_gpus == 1 and plan.learner_cpus == 1
    # The actors' CPUs come from the actor nodes only: 32 CPUs for 32 actors.
    assert plan.actor_cpus == 1.0
    more = resources.plan_resources(0, 0, num_actors=32 * 2, num_learner_replicas=None, nodes=CLOUD,
                                    actor_resources={"actor": 0.5})
    assert more.actor_cpus == 0.5
    assert "actor=0.5" in more.describe() and "on node 10.0.0.1" in more.describe()


def test_too_many_actors_for_the_actor_units_names_the_flag():
    with pytest.raises(ValueError, match="--num-actors 32 or fewer"):
        resources.plan_resources(0, 0, num_actors=33, num_learner_replicas=None, nodes=CLOUD)


def test_plain_local_ray_is_planned_as_before():
    local = [_node(1, 2, head=True)]
    plan = resources.plan_resources(2, 0, num_actors=2, num_learner_replicas=1, nodes=local)
    old = resources.plan_resources(2, 0, num_actors=2, num_learner_replicas=1)
    assert plan == old
    assert plan.actor_resources == {} and plan.learner_resources == {}
    assert plan.learner_node_id is None  # one node: nothing to pin
    assert placement.ray_options(plan, "actor") == {}
    assert placement.ray_options(plan, "replay") == {}


def test_explicit_resource_that_no_node_offers_fails_with_the_fix():
    with pytest.raises(ValueError, match=r"--actor-resources asks for fast_net .*ray start --resources"):
        resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=CLOUD,
                                 actor_resources={"fast_net": 1})
    with pytest.raises(ValueError, match="--learner-resources asks for learner"):
        resources.plan_resources(2, 0, num_actors=2, num_learner_replicas=1,
                                 nodes=[_node(1, 2, head=True)], learner_resources={"learner": 1})
    # More of a resource than any one node has cannot host the learner.
    with pytest.raises(ValueError, match="no single node offers the learner.s learner=2"):
        resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=CLOUD,
                                 learner_resources={"learner": 2})


def test_empty_request_opts_out_and_replay_stays_with_the_learner():
    plan = resources.plan_resources(0, 0, num_actors=4, num_learner_replicas=None, nodes=CLOUD,
                                    actor_resources={}, learner_resources={})
    assert plan.actor_resources == {} and plan.learner_resources == {}
    # Still pinned: the learner and replay go to the GPU node, together.
    assert plan.learner_node_id == _id(1)
    learner, replay = placement.ray_options(plan, "learner"), placement.ray_options(plan, "replay")
    assert "resources" not in learner
    assert learner["scheduling_strategy"].node_id == replay["scheduling_strategy"].node_id == _id(1)
    assert learner["scheduling_strategy"].soft is False


def test_ray_options_carry_the_role_resources():
    plan = resources.plan_resources(0, 0, num_actors=4, num_learner_replicas=None, nodes=CLOUD)
    assert placement.ray_options(plan, "actor") == {"resources": {"actor": 1.0}}
    assert placement.ray_options(plan, "learner")["resources"] == {"learner": 1.0}
    assert "resources" not in placement.ray_options(plan, "replay")  # it holds no learner unit
    assert placement.ray_options(plan, "evaluator") == {}


def test_learner_node_prefers_gpus_then_the_head():
    two_learners = [_node(1, 4, head=True, learner=1.0), _node(2, 4, gpus=2, learner=1.0),
                    _node(3, 4, actor=4.0)]
    plan = resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=two_learners)
    assert plan.learner_node_id == _id(2) and plan.learner_gpus == 2
    cpu_only = [_node(1, 4, learner=1.0), _node(2, 4, head=True, learner=1.0), _node(3, 4, actor=4.0)]
    plan = resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=cpu_only)
    assert plan.learner_node_id == _id(2)


def test_actor_cpus_fit_whole_actors_per_node():
    # 3 actors over two 1-CPU nodes do not fit at 2/3 CPU each (one node would
    # need 4/3): the split shrinks to 0.5, which fits 2 per node.
    nodes = [_node(1, 4, head=True, learner=1.0), _node(2, 1, actor=4.0), _node(3, 1, actor=4.0)]
    plan = resources.plan_resources(0, 0, num_actors=3, num_learner_replicas=None, nodes=nodes)
    assert plan.actor_cpus == 0.5
    with pytest.raises(ValueError, match="lower --actor-cpus"):
        resources.plan_resources(0, 0, num_actors=3, num_learner_replicas=None, nodes=nodes,
                                 actor_cpus=0.75)
    # The learner's CPUs are taken from its node when actors may run there too.
    shared = [_node(1, 3, head=True, learner=1.0, actor=2.0), _node(2, 1, actor=1.0)]
    plan = resources.plan_resources(0, 0, num_actors=3, num_learner_replicas=None, nodes=shared,
                                    learner_cpus=2)
    assert plan.learner_cpus == 2 and plan.actor_cpus == 0.5  # 1 + 1 CPUs left for 3 actors


def test_custom_resource_requests_are_validated():
    with pytest.raises(ValueError, match="CPU is not a custom resource; use --actor-cpus"):
        resources.check_custom_resources("--actor-resources", {"CPU": 1})
    with pytest.raises(ValueError, match="must be > 0"):
        resources.check_custom_resources("--learner-resources", {"learner": 0})
    with pytest.raises(ValueError, match="bad resource name"):
        resources.check_custom_resources("--actor-resources", {"node:10.0.0.1": 1})
    assert resources.check_custom_resources("--actor-resources", {"actor": "2"}) == {"actor": 2.0}


def test_layout_config_validates_placement_fields():
    cfg = layout.RayLayoutConfig(actor_resources={"actor": 1}, learner_cpus=2)
    assert cfg.actor_resources == {"actor": 1.0} and cfg.learner_resources is None
    with pytest.raises(ValueError, match="--actor-cpus must be > 0"):
        layout.RayLayoutConfig(actor_cpus=0)
    with pytest.raises(ValueError, match="GPU is not a custom resource"):
        layout.RayLayoutConfig(learner_resources={"GPU": 1})


def test_placement_flags_parse_and_reject_bad_values(capsys):
    parser = common.Parser(prog="rlplat train x")
    common.add_placement_flags(parser)
    args = parser.parse_args(["--actor-resources", "actor=1,fast_net=0.5", "--learner-resources", "none",
                              "--learner-cpus", "2"])
    assert common.placement_from_args(args) == {
        "actor_resources": {"actor": 1.0, "fast_net": 0.5}, "learner_resources": {}, "learner_cpus": 2.0}
    assert common.placement_from_args(parser.parse_args([])) == {}
    with pytest.raises(common.UsageError, match="--actor-cpus must be > 0"):
        common.placement_from_args(argparse.Namespace(actor_cpus=-1.0))
    for bad in (["--actor-resources", "actor"], ["--actor-resources", "actor=0"],
                ["--learner-resources", "learner=x"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(bad)
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1  # one line


def test_describe_groups_workers_by_node():
    where = {"learner": {"node_id": "abcdef0123", "node_ip": "10.0.0.1", "custom_resources": {"learner": 1.0}},
             "replay": {"node_id": "abcdef0123", "node_ip": "10.0.0.1", "custom_resources": {"learner": 1.0}},
             "actor 0": {"node_id": "9999999999", "node_ip": "10.0.0.2", "custom_resources": {"actor": 16.0}},
             "actor 1": None}
    lines = placement.describe(where)
    assert lines[0] == "learner, replay on 10.0.0.1 (node abcdef01, learner=1)"
    assert lines[1] == "actor 0 on 10.0.0.2 (node 99999999, actor=16)"
    assert lines[2].startswith("actor 1 on no node yet")
