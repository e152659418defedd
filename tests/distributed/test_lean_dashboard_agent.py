"""``lean_dashboard_agent`` runs the agent script it is given, with no agent modules when the agent is minimal.

A stand-in ``agent.py`` in a temporary folder reports what Ray's agent would
see: its ``sys.argv``, its ``sys.path``, and what
``ray.dashboard.utils.get_all_modules`` finds for agent modules.
"""

import json
import os
import subprocess
import sys

import pytest

from rlplat.distributed import lean_dashboard_agent

SCRIPT = lean_dashboard_agent.__file__

STAND_IN = """
import json, sys
import ray.dashboard.utils as dashboard_utils
print(json.dumps({"argv": sys.argv, "path": sys.path,
                  "agent_modules": len(dashboard_utils.get_all_modules(dashboard_utils.DashboardAgentModule)),
                  "is_main": __name__ == "__main__"}))
"""


def _run_stand_in(tmp_path, *args):
    agent = tmp_path / "agent.py"
    agent.write_text(STAND_IN)
    done = subprocess.run([sys.executable, "-u", SCRIPT, str(agent), *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return str(agent), json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.multiprocess
def test_a_minimal_agent_finds_no_modules_and_gets_its_own_arguments_and_folder(tmp_path):
    agent, seen = _run_stand_in(tmp_path, "--node-id=ab", "--minimal")
    path = seen.pop("path")
    assert seen == {"argv": [agent, "--node-id=ab", "--minimal"], "agent_modules": 0, "is_main": True}
    # The agent's folder is on the path where Python puts a script's folder (Ray puts its own first);
    # this script's folder, whose modules could shadow the agent's imports, is not.
    assert str(tmp_path) in path[:2] and os.path.dirname(SCRIPT) not in path, path[:3]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_an_agent_that_is_not_minimal_finds_rays_modules(tmp_path):
    agent, seen = _run_stand_in(tmp_path, "--node-id=ab")
    assert seen["argv"] == [agent, "--node-id=ab"] and seen["agent_modules"] > 0, seen


def test_other_module_types_are_still_looked_up():
    calls = []
    lookup = lean_dashboard_agent._no_agent_modules(  # pylint: disable=protected-access
        lambda module_type: calls.append(module_type) or ["found"], "DashboardAgentModule")

    class DashboardAgentModule:  # pylint: disable=too-few-public-methods
        pass

    class DashboardHeadModule:  # pylint: disable=too-few-public-methods
        pass

    assert lookup(DashboardAgentModule) == [] and not calls
    assert lookup(DashboardHeadModule) == ["found"] and calls == [DashboardHeadModule]
    assert os.path.isfile(SCRIPT)
