"""The resource plan on multi-node clusters: custom role resources, the learner's node, fit checks.

Pure logic over ``NodeInfo`` records (what ``ray.nodes()`` reports), so every
cluster shape is cheap to test; tests/multinode runs the same plan on a real
three-node Ray cluster.
"""


import pytest

from rlplat import runners
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
    with pytest.raises(ValueError, match="num_actors 32 or fewer"):
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
    with pytest.raises(ValueError, match=r"actor_resources asks for fast_net .*ray start --resources"):
        resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=CLOUD,
                                 actor_resources={"fast_net": 1})
    with pytest.raises(ValueError, match="learner_resources asks for learner"):
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
    with pytest.raises(ValueError, match="lower actor_cpus"):
        resources.plan_resources(0, 0, num_actors=3, num_learner_replicas=None, nodes=nodes,
                                 actor_cpus=0.75)
    # The learner's CPUs are taken from its node when actors may run there too.
    shared = [_node(1, 3, head=True, learner=1.0, actor=2.0), _node(2, 1, actor=1.0)]
    plan = resources.plan_resources(0, 0, num_actors=3, num_learner_replicas=None, nodes=shared,
                                    learner_cpus=2)
    assert plan.learner_cpus == 2 and plan.actor_cpus == 0.5  # 1 + 1 CPUs left for 3 actors


def test_custom_resource_requests_are_validated():
    with pytest.raises(ValueError, match="CPU is not a custom resource; use actor_cpus"):
        resources.check_custom_resources("actor_resources", {"CPU": 1})
    with pytest.raises(ValueError, match="must be > 0"):
        resources.check_custom_resources("learner_resources", {"learner": 0})
    with pytest.raises(ValueError, match="bad resource name"):
        resources.check_custom_resources("actor_resources", {"node:10.0.0.1": 1})
    assert resources.check_custom_resources("actor_resources", {"actor": "2"}) == {"actor": 2.0}


def test_layout_config_validates_placement_fields():
    cfg = runners.RayLayoutConfig(actor_resources={"actor": 1}, learner_cpus=2)
    assert cfg.actor_resources == {"actor": 1.0} and cfg.learner_resources is None
    with pytest.raises(ValueError, match="^actor_cpus must be > 0"):
        runners.RayLayoutConfig(actor_cpus=0)
    with pytest.raises(ValueError, match="GPU is not a custom resource"):
        runners.RayLayoutConfig(learner_resources={"GPU": 1})


def test_placement_flags_parse_and_reject_bad_values(capsys):
    parser = common.Parser(prog="rlplat train x")
    common.add_placement_flags(parser)
    args = parser.parse_args(["--actor-resources", "actor=1,fast_net=0.5", "--learner-resources", "none",
                              "--learner-cpus", "2"])
    assert common.placement_from_args(args) == {
        "actor_resources": {"actor": 1.0, "fast_net": 0.5}, "learner_resources": {}, "learner_cpus": 2.0}
    assert common.placement_from_args(parser.parse_args([])) == {}
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


# --------------------------------------------- several learner workers (W > 1)
def test_learner_workers_that_do_not_fit_name_the_field():
    # CLOUD has one `learner` unit: a second worker could never be scheduled.
    with pytest.raises(ValueError, match=r"num_learner_workers 2: .* room for 1 .*"
                                         r"pass num_learner_workers 1 or fewer"):
        resources.plan_resources(0, 0, num_actors=4, num_learner_replicas=None, nodes=CLOUD,
                                 num_learner_workers=2)
    # Enough `learner` units, but CPUs for only 2 workers of 1 CPU each.
    small = [_node(1, 2, head=True, learner=4.0), _node(2, 2, actor=2.0)]
    with pytest.raises(ValueError, match="room for 2 .*num_learner_workers 2 or fewer") as info:
        resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=small,
                                 learner_cpus=1, num_learner_workers=3)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="num_learner_workers must be >= 1"):
        resources.plan_resources(2, 0, num_actors=2, num_learner_replicas=1, num_learner_workers=0)


def test_learner_workers_need_the_gpus_of_one_learner_each():
    # One worker per GPU node of the biggest kind: a 1-GPU learner node cannot host a 2-GPU worker.
    gpu_nodes = [_node(1, 4, head=True, gpus=1, learner=1.0), _node(2, 4, gpus=2, learner=1.0),
                 _node(3, 4, actor=4.0)]
    with pytest.raises(ValueError, match=r"needs CPU=1, GPU=2, learner=1 .* room for 1 .*"
                                         r"num_learner_replicas"):
        resources.plan_resources(0, 0, num_actors=4, num_learner_replicas=None, nodes=gpu_nodes,
                                 num_learner_workers=2)
    plan = resources.plan_resources(0, 0, num_actors=4, num_learner_replicas=1, nodes=gpu_nodes,
                                    num_learner_workers=2)
    assert plan.learner_gpus == 1 and plan.learner_cpus == 1.0
    # The chief gets the node one learner would (most GPUs), the second the other node.
    assert [node_id for node_id, _ in plan.learner_worker_nodes] == [_id(2), _id(1)]


def test_learner_workers_spread_over_learner_nodes_with_the_chief_next_to_replay():
    cpu_nodes = [_node(1, 4, learner=1.0), _node(2, 4, head=True, learner=1.0),
                 _node(3, 4, learner=1.0), _node(4, 4, actor=4.0)]
    plan = resources.plan_resources(0, 0, num_actors=4, num_learner_replicas=None, nodes=cpu_nodes,
                                    num_learner_workers=3)
    # Chief on the head (as one learner would be), the others one per remaining learner node.
    assert [ip for _, ip in plan.learner_worker_nodes] == ["10.0.0.2", "10.0.0.1", "10.0.0.3"]
    assert plan.learner_node_id == _id(2)
    assert plan.learner_cpus == 1.0  # 16 CPUs: budget min(3, 8) = 3, one per worker
    for index, (node_id, _) in enumerate(plan.learner_worker_nodes):
        options = placement.ray_options(plan, "learner", index)
        assert options["resources"] == {"learner": 1.0}
        assert options["scheduling_strategy"].node_id == node_id
        assert options["scheduling_strategy"].soft is False
    chief = placement.ray_options(plan, "learner", 0)["scheduling_strategy"].node_id
    assert placement.ray_options(plan, "replay")["scheduling_strategy"].node_id == chief
    group = placement.ray_options(plan, "learner_group")
    assert group["scheduling_strategy"].node_id == chief and "resources" not in group
    with pytest.raises(ValueError, match="learner worker 3 is not in the plan"):
        placement.ray_options(plan, "learner", 3)
    assert "3 learner workers of 1 CPU + learner=1 on nodes 10.0.0.2, 10.0.0.1, 10.0.0.3" in plan.describe()


def test_learner_workers_stack_where_a_node_holds_several():
    # The shape of tests/multinode with `learner=2` on the head.
    nodes = [_node(1, 3, head=True, learner=2.0), _node(2, 1, actor=1.0), _node(3, 1, actor=1.0)]
    plan = resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=nodes,
                                    num_learner_workers=2)
    assert [node_id for node_id, _ in plan.learner_worker_nodes] == [_id(1), _id(1)]
    assert plan.learner_cpus == 1.0 and plan.actor_cpus == 1.0
    # Learner workers on a node that actors share take their CPUs from it, per worker.
    shared = [_node(1, 4, head=True, learner=2.0, actor=4.0)]
    one = resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=shared,
                                   learner_cpus=1)
    two = resources.plan_resources(0, 0, num_actors=2, num_learner_replicas=None, nodes=shared,
                                   learner_cpus=1, num_learner_workers=2)
    assert one.actor_cpus == 1.0 and two.actor_cpus == 1.0  # 3 and 2 CPUs left, at most 1 each
    three = resources.plan_resources(0, 0, num_actors=3, num_learner_replicas=None, nodes=shared,
                                     learner_cpus=1, num_learner_workers=2)
    assert three.actor_cpus == 0.66  # 4 - 2 * 1 CPUs for 3 actors


def test_learner_workers_share_the_learner_budget_on_two_cores():
    one = resources.plan_resources(2, 0, num_actors=2, num_learner_replicas=None)
    two = resources.plan_resources(2, 0, num_actors=2, num_learner_replicas=None, num_learner_workers=2)
    assert one.learner_cpus == 1.0 and two.learner_cpus == 0.5  # 2 x 0.5: the same core in all
    assert two.actor_cpus == one.actor_cpus == 0.5
    assert two.num_learner_workers == 2 and two.learner_worker_nodes == ()  # one node: no pins
    assert placement.ray_options(two, "learner", 1) == {}
    assert two.describe().startswith("2 learner workers of 0.5 CPU (TF threads")
    # W = 1 keeps the plan it always had (the new fields at their defaults).
    assert one.num_learner_workers == 1 and one.describe().startswith("learner 1 CPU (TF threads")


def test_describe_gives_each_learner_worker_a_line():
    head = {"node_id": "abcdef0123", "node_ip": "10.0.0.1", "custom_resources": {"learner": 2.0}}
    where = {"learner group": head, "replay": head,
             "learner worker 0": {**head, "worker_index": 0, "is_chief": True},
             "learner worker 1": {**head, "worker_index": 1, "is_chief": False},
             "learner worker 2": None}
    assert placement.describe(where) == [
        "learner group, replay on 10.0.0.1 (node abcdef01, learner=2)",
        "learner worker 0 (chief) on 10.0.0.1 (node abcdef01, learner=2)",
        "learner worker 1 on 10.0.0.1 (node abcdef01, learner=2)",
        "learner worker 2 on no node yet (not up or failed; see the worker logs)"]
