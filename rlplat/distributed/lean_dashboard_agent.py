"""Ray's dashboard agent, run without its modules: the agent of a local instance started by ``lean_services``.

Run as a script by the raylet, in place of Ray's ``dashboard/agent.py``:
``python -u lean_dashboard_agent.py <path of Ray's agent.py> <the agent's arguments>``.

Why: the raylet registers its node with the GCS, and so lets ``ray.init``
return, only once its dashboard agent has written the agent's ports. Ray's
agent writes the last of them after it has imported every module of
``ray.dashboard.modules`` to find its own (about 0.75 s on 2 cores, on every
local run's path to its learner) and started them. In a minimal agent with no
dashboard head, which is how ``lean_services`` runs it, those modules serve
nothing: it has no gRPC or HTTP server for the job, log, health and reporter
modules to serve on, and the event module only fails to find the dashboard.

So this imports Ray's agent as it is, lets it find no modules, and runs it:
it still writes its ports and its address, and still exits with its raylet.
Only the module list changes; with any other argument list, or a Ray whose
agent lacks the hook, Ray's agent runs unchanged.
"""

from __future__ import annotations

import os
import runpy
import sys


def _no_agent_modules(get_all_modules, agent_module_type_name: str):
    def get_all_modules_but_agents(module_type):
        if getattr(module_type, "__name__", "") == agent_module_type_name:
            return []
        return get_all_modules(module_type)

    return get_all_modules_but_agents


def main(argv) -> None:
    """Runs Ray's agent (``argv[1]``) with ``argv[2:]``, loading no agent modules when it runs ``--minimal``."""
    agent_path, agent_args = argv[1], argv[2:]
    # As when Ray's agent runs directly: its own folder first on the path, not this one.
    sys.path[0] = os.path.dirname(os.path.abspath(agent_path))
    if "--minimal" in agent_args:
        try:
            import ray.dashboard.utils as dashboard_utils  # pylint: disable=g-import-not-at-top

            get_all_modules = dashboard_utils.get_all_modules
        except (ImportError, AttributeError):
            get_all_modules = None
        if callable(get_all_modules):
            dashboard_utils.get_all_modules = _no_agent_modules(get_all_modules, "DashboardAgentModule")
    sys.argv = [agent_path, *agent_args]
    runpy.run_path(agent_path, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
