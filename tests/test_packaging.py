"""The installed project puts no generic top-level name (agents, envs) on the import path."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import importlib.util, json
found = {name: importlib.util.find_spec(name) for name in ("agents", "envs", "rlplat_agents", "rlplat_envs", "rlplat")}
print(json.dumps({name: spec and (spec.submodule_search_locations and list(spec.submodule_search_locations)
                                   or spec.origin) for name, spec in found.items()}))
"""


def test_agents_and_envs_install_as_rlplat_agents_and_rlplat_envs(tmp_path):
    import json

    # From a directory outside the repository: only what the install provides is importable.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=str(tmp_path), env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    found = json.loads(out)
    assert found["agents"] is None and found["envs"] is None, found
    assert os.path.realpath(found["rlplat_agents"][0]) == os.path.join(os.path.realpath(REPO), "agents")
    assert os.path.realpath(found["rlplat_envs"][0]) == os.path.join(os.path.realpath(REPO), "envs")


def test_setup_finds_every_agent_folder_under_its_installed_name():
    sys.path.insert(0, REPO)
    try:
        import setup  # pylint: disable=g-import-not-at-top  (the repository's setup.py; builds nothing)
    finally:
        sys.path.remove(REPO)
    packages = setup._packages()
    folders = sorted(name for name in os.listdir(os.path.join(REPO, "agents"))
                     if os.path.exists(os.path.join(REPO, "agents", name, "__init__.py")))
    assert {f"rlplat_agents.{name}" for name in folders} <= set(packages)
    assert {"rlplat", "rlplat.distributed", "rlplat_agents", "rlplat_envs"} <= set(packages)
    assert not [p for p in packages if p.split(".")[0] in ("agents", "envs")]
