"""tests/scheduling.py: the order and units of work the suite's modules are handed out in (pure logic)."""

import os
import re

import scheduling

SECONDS = {"tests/a/test_long.py": 300.0, "tests/b/test_mid.py": 40.0,
           "tests/clusters/test_ray_up_loopback.py": 100.0, "tests/multinode/test_multinode_placement.py": 150.0}


def test_units_are_whole_modules_even_when_a_parameter_id_holds_double_colons():
    assert scheduling.unit_of("tests/x/test_y.py::test_z[ray::ReplayServer-died]") == "tests/x/test_y.py"
    assert scheduling.unit_of("tests/x/test_y.py::TestC::test_z") == "tests/x/test_y.py"
    assert (scheduling.unit_of("tests/clusters/test_ray_up_loopback.py::test_a")
            == scheduling.unit_of("tests/multinode/test_multinode_placement.py::test_b")
            == scheduling.CLUSTER_UNIT)


def test_longest_units_first_cluster_modules_adjacent_unknown_modules_keep_their_place():
    items = ["tests/b/test_mid.py::t1", "tests/c/test_new.py::t1", "tests/clusters/test_ray_up_loopback.py::t1",
             "tests/a/test_long.py::t1", "tests/b/test_mid.py::t2", "tests/d/test_new2.py::t1",
             "tests/multinode/test_multinode_placement.py::t1", "tests/a/test_long.py::t2"]
    scheduling.order_by_recorded_seconds(items, SECONDS)
    # Cluster unit: 100 + 150 = 250 s, after test_long's 300 s; test order inside a module kept.
    assert items == ["tests/a/test_long.py::t1", "tests/a/test_long.py::t2",
                     "tests/clusters/test_ray_up_loopback.py::t1", "tests/multinode/test_multinode_placement.py::t1",
                     "tests/b/test_mid.py::t1", "tests/b/test_mid.py::t2",
                     "tests/c/test_new.py::t1", "tests/d/test_new2.py::t1"]


def test_the_recorded_file_names_real_modules():
    seconds = scheduling.load_module_seconds()
    assert seconds, "tests/module_seconds.json is missing or empty"
    root = scheduling.os.path.dirname(scheduling.MODULE_SECONDS_FILE)
    missing = [m for m in seconds if not scheduling.os.path.exists(scheduling.os.path.join(root, "..", m))]
    assert not missing, f"renamed or removed modules; refresh the file ({missing})"


def test_every_module_that_takes_the_fake_cluster_turn_is_in_one_unit():
    """A module holding ``loopback_cluster_turn`` outside ``CLUSTER_MODULES`` would run on the other
    worker at the same time and only wait there for the lock, its worker idle."""
    root = os.path.dirname(os.path.abspath(__file__))
    holders = set()
    for folder, _, files in os.walk(root):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    if re.search(r'^\s*@?pytest\.mark\.usefixtures\("loopback_cluster_turn"\)', f.read(), re.M):
                        holders.add(os.path.relpath(path, os.path.dirname(root)))
    assert holders == set(scheduling.CLUSTER_MODULES)
