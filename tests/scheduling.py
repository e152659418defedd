"""Which test module runs when, under pytest-xdist: longest first, whole modules, cluster modules together.

The suite is CPU-bound on 2 cores and a handful of one-test modules (the
learning tests, a fake cluster) take minutes each. pytest-xdist's
``--dist loadscope`` hands out modules with the most tests first, so those
came last: one worker sat idle for minutes while the other ran a learning
test alone. Here:

- ``order_by_recorded_seconds`` sorts the collected items (in every
  worker, identically) by the module's seconds recorded in
  ``module_seconds.json`` of a previous run, longest first; a module not in
  the file counts 0 and keeps its place among those. Refresh the file with
  ``scripts/test.sh --write-module-seconds tests/module_seconds.json``.
- ``ModuleScheduling`` keeps that order (no reordering by test count) and
  makes each module one unit of work. pytest-xdist's own scope splits a
  node id at its last ``::``, so a parameter id holding ``ray::Actor`` split
  a module in two and its module fixtures were built on both workers.
  Modules that take the machine's one fake-cluster turn
  (``CLUSTER_MODULES``) form one unit: on two workers at once, one would
  only wait for the other's lock.
- ``ModuleSeconds`` adds up set-up, call and tear-down seconds per module
  (in the controller, or the only process) and writes them.
"""

from __future__ import annotations

import collections
import json
import os
from typing import Dict

MODULE_SECONDS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_seconds.json")
# Modules that hold the ``loopback_cluster_turn`` fixture (tests/conftest.py).
CLUSTER_MODULES = ("tests/clusters/test_ray_up_loopback.py", "tests/multinode/test_multinode_placement.py",
                   "tests/multinode/test_multinode_weights.py")
CLUSTER_UNIT = "fake-cluster modules"


def module_of(nodeid: str) -> str:
    """``tests/x/test_y.py`` of ``tests/x/test_y.py::test_z[a::b]``."""
    return nodeid.split("::", 1)[0]


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its module, or the cluster modules' shared unit."""
    module = module_of(nodeid)
    return CLUSTER_UNIT if module in CLUSTER_MODULES else module


def load_module_seconds(path: str = MODULE_SECONDS_FILE) -> Dict[str, float]:
    """Recorded seconds per module; empty when there is no file."""
    try:
        with open(path) as f:
            return {str(k): float(v) for k, v in json.load(f).items()}
    except FileNotFoundError:
        return {}


def order_by_recorded_seconds(items, seconds: Dict[str, float]) -> None:
    """Sorts ``items`` in place: the units with the most recorded seconds first, stable otherwise.

    A unit's seconds are its modules' sum, so the cluster modules stay adjacent.
    """
    def nodeid(item):
        return item if isinstance(item, str) else item.nodeid

    unit_seconds = collections.Counter()
    for module in {module_of(nodeid(item)) for item in items}:
        unit_seconds[unit_of(module)] += seconds.get(module, 0.0)
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(unit_of(nodeid(item)), i)
    items.sort(key=lambda item: (-unit_seconds[unit_of(nodeid(item))], first_seen[unit_of(nodeid(item))]))


def make_module_scheduling(config, log):
    """A ``LoadScopeScheduling`` with one unit per module (cluster modules together), in collection order."""
    from xdist.scheduler import LoadScopeScheduling  # pylint: disable=g-import-not-at-top

    class ModuleScheduling(LoadScopeScheduling):
        """Hands out whole modules in the order the workers collected them (see the module docstring)."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            # The workers already sorted the items longest first; sorting the
            # units by test count would undo it.
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ModuleScheduling(config, log)


class XdistScheduling:
    """Plugin: makes ``--dist loadscope`` use ``ModuleScheduling`` (registered only where pytest-xdist is)."""

    def pytest_xdist_make_scheduler(self, config, log):
        if config.getvalue("dist") == "loadscope":
            return make_module_scheduling(config, log)
        return None


class ModuleSeconds:
    """Plugin: adds up each module's set-up, call and tear-down seconds and writes them as JSON at the end."""

    def __init__(self, path: str):
        self._path = path
        self._seconds = collections.Counter()

    def pytest_runtest_logreport(self, report):
        self._seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session):
        del session
        ordered = {module: round(s, 1) for module, s in sorted(self._seconds.items(), key=lambda kv: -kv[1])}
        with open(self._path, "w") as f:
            json.dump(ordered, f, indent=1)
            f.write("\n")
