"""Ray's serialization addons run only where pydantic, pyarrow or starlette is already imported."""

import json
import os
import subprocess
import sys
import types

import pytest

from rlplat.distributed import ray_serialization

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _install_on(monkeypatch, loaded):
    calls = []
    addons = types.SimpleNamespace(apply=lambda context: calls.append(context))
    monkeypatch.setattr("ray.util.serialization_addons", addons, raising=False)
    monkeypatch.setitem(sys.modules, "ray.util.serialization_addons", addons)
    for name in ray_serialization.ADDON_LIBRARIES:
        if name in loaded:
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        else:
            monkeypatch.delitem(sys.modules, name, raising=False)
    ray_serialization.install()
    ray_serialization.install()  # idempotent: one wrapper, not two
    return addons, calls


def test_without_the_libraries_the_addons_are_skipped(monkeypatch):
    addons, calls = _install_on(monkeypatch, loaded=())
    addons.apply("context")
    assert calls == [] and addons.apply.rlplat_lean and not getattr(addons.apply.full, "rlplat_lean", False)


@pytest.mark.parametrize("library", ray_serialization.ADDON_LIBRARIES)
def test_with_any_of_the_libraries_the_addons_run_as_before(monkeypatch, library):
    addons, calls = _install_on(monkeypatch, loaded=(library,))
    addons.apply("context")
    assert calls == ["context"]


_DRIVER = """
import json, sys
import ray
from rlplat.distributed import cluster
from rlplat.distributed.workers import common
from serialization_probe import Probe
connection = cluster.connect(None, num_cpus=1)
try:
    names = ["pydantic", "pyarrow"]
    worker = ray.get(common.remote(Probe, num_cpus=0).remote().modules.remote(names), timeout=120)
    print(json.dumps({"worker": worker, "driver": {n: n in sys.modules for n in names}}))
finally:
    cluster.disconnect(connection)
"""


@pytest.mark.multiprocess
def test_a_worker_and_its_driver_import_neither_pydantic_nor_pyarrow():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _DRIVER], cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"worker": {"pydantic": False, "pyarrow": False},
                    "driver": {"pydantic": False, "pyarrow": False}}, seen
