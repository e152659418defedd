"""Starting a private local Ray instance lean: the services it never uses left out, its start not waited on.

``cluster.connect()`` with no address starts the local instance inside
``lean_services``, with ``SYSTEM_CONFIG``. Ray's own ``ray start`` clusters,
and any instance started outside the block, are not touched. Each change
replaces one Ray attribute for the length of the block, and a Ray that lacks
it starts that part as it always did.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

# How often, and how long, ``ray.init`` looks for the raylet's registration
# before it leaves the rest of the wait to Ray's own ``get_node``.
REGISTRATION_POLL_S = 0.02
REGISTRATION_WAIT_S = 10.0


# Ray starts one idle worker per CPU for the first driver, with the job's
# (empty) runtime_env. Every rlplat worker asks for a runtime_env of its role,
# so none of them is ever used: on a small machine they only took CPU from
# the start-up that matters (two processes importing Ray beside the learner's).
SYSTEM_CONFIG = {"prestart_worker_first_driver": False}


class lean_services:  # pylint: disable=invalid-name
    """The local instance started inside the block skips Ray services a private instance never uses.

    ``ray.init`` passes no argument for these, so the block gives Ray's
    ``RayParams`` other defaults (a Ray without that class starts everything):

    - the dashboard agent's HTTP port is picked free (0) instead of the fixed
      52365. Another Ray instance on the host (a test, a sweep trial, another
      user's run) holds 52365, and the agent then retried the bind for ~3.5 s
      while the raylet, and with it ``ray.init``, waited for the agent;
    - no autoscaler monitor: a local instance has a fixed size, nothing to scale;
    - no log monitor unless worker output goes to the driver
      (``log_to_driver``): it only forwards that output, and the worker logs
      stay in the session folder either way;
    - no dashboard head. With ``include_dashboard=False`` Ray still starts
      ``dashboard.py`` with its usage-stats module alone, and ``ray.init``
      polls until that process has written its address: about 2 s of the
      start-up and 1.1-1.5 CPU-s on 2 cores, for a head that serves nothing
      here (no job API, no state API);
    - ``ray.init`` learns that the raylet has registered with the GCS by
      polling every 20 ms (``_registered_then``) instead of through Ray's
      ``get_node``, which looks once a second: the raylet registers about
      0.85 s after it starts here, so ``ray.init`` waited 1 or 2 s for it;
    - the raylet's dashboard agent runs as in Ray's minimal install: Ray
      decides that by importing the dashboard's optional dependencies
      (aiohttp and the rest, ~0.2 s in the driver, on ``ray.init``'s path),
      and a private instance needs none of the agent's HTTP modules;
    - that agent runs through ``lean_dashboard_agent``, which starts it with
      no modules: the raylet registers, and ``ray.init`` returns, only once
      the agent has written its ports, which Ray's agent does after
      importing and starting every dashboard module (about 0.75 s, and
      0.7 of the agent's 1.3-1.4 CPU-s, per instance here), though a
      minimal agent without a dashboard head has nothing for them to serve;
    - each worker starts through ``lean_setup_worker``, which sets its
      runtime_env's variables and execs it as Ray's setup script does, but
      without importing Ray first (in ``bench/startup.py``'s runs, 0.3
      CPU-s less for the learner's start and 0.2 for each actor's).

    Ray's own ``ray start`` clusters are not touched.
    """

    def __init__(self, log_to_driver: bool):
        self._log_to_driver = bool(log_to_driver)

    def __enter__(self):
        from ray._private import parameter  # pylint: disable=g-import-not-at-top

        self._parameter = parameter
        self._saved = getattr(parameter, "RayParams", None)
        if isinstance(self._saved, type):
            base, log_to_driver = self._saved, self._log_to_driver

            class LeanRayParams(base):  # pylint: disable=too-few-public-methods
                def __init__(self, *args, **kwargs):
                    kwargs.setdefault("dashboard_agent_listen_port", 0)
                    kwargs.setdefault("no_monitor", True)
                    kwargs.setdefault("include_log_monitor", log_to_driver)
                    if os.path.isfile(_SETUP_WORKER_SCRIPT):
                        kwargs.setdefault("setup_worker_path", _SETUP_WORKER_SCRIPT)
                    super().__init__(*args, **kwargs)

            parameter.RayParams = LeanRayParams
        from ray._private import node, services, utils  # pylint: disable=g-import-not-at-top

        # (owner, attribute, original); a Ray without one of them starts that part as it always did.
        self._replaced = []
        get_node = getattr(services, "get_node", None)
        python_command = getattr(services, _PYTHON_COMMAND, None)
        for owner, name, replacement in ((getattr(node, "Node", None), "start_api_server", _no_api_server),
                                         (utils, "get_dashboard_dependency_error", _minimal_dashboard_agent),
                                         (services, "get_node", _registered_then(get_node)),
                                         (services, _PYTHON_COMMAND, _agent_without_modules(python_command))):
            original = getattr(owner, name, None)
            if callable(original):
                setattr(owner, name, replacement)
                self._replaced.append((owner, name, original))
        return self

    def __exit__(self, *exc_info):
        if isinstance(self._saved, type):
            self._parameter.RayParams = self._saved
        for owner, name, original in reversed(self._replaced):
            setattr(owner, name, original)
        return False


# Ray's helper that begins the command line of each of its Python services.
_PYTHON_COMMAND = "_build_python_executable_command_memory_profileable"
_AGENT_COMPONENT = "dashboard_agent"  # ray_constants.PROCESS_TYPE_DASHBOARD_AGENT
_HERE = os.path.dirname(os.path.abspath(__file__))  # the lean scripts Ray's processes start with sit beside this module
_AGENT_SCRIPT = os.path.join(_HERE, "lean_dashboard_agent.py")
_SETUP_WORKER_SCRIPT = os.path.join(_HERE, "lean_setup_worker.py")


def _agent_without_modules(python_command: Optional[Callable[..., list]]) -> Optional[Callable[..., list]]:
    """Ray's ``python -u`` prefix of a service's command, with ``lean_dashboard_agent`` after it for the agent.

    Ray puts the path of its ``agent.py`` and the agent's arguments after the
    prefix, so the script receives them and runs that agent. None when Ray
    has no such helper.
    """
    if not callable(python_command):
        return None

    def command(component: str, *args, **kwargs) -> list:
        prefix = list(python_command(component, *args, **kwargs))
        if component == _AGENT_COMPONENT and os.path.isfile(_AGENT_SCRIPT):
            prefix.append(_AGENT_SCRIPT)
        return prefix

    return command


def _minimal_dashboard_agent() -> ImportError:
    """``get_dashboard_dependency_error`` inside ``lean_services``: the agent starts ``--minimal``."""
    return ImportError("rlplat's local Ray instance runs the dashboard agent without its optional modules")


def _no_api_server(self, **unused_kwargs) -> None:  # pylint: disable=unused-argument
    """``Node.start_api_server`` inside ``lean_services``: no dashboard head is started."""


def _registered_then(get_node: Optional[Callable[..., Any]]) -> Optional[Callable[..., Any]]:
    """``services.get_node`` inside ``lean_services``: Ray's, called once the node is registered.

    Ray's ``get_node`` asks the GCS for the node and, while it is not
    there, sleeps a whole second before asking again (in C++). This asks the
    node table every ``REGISTRATION_POLL_S`` first, for at most
    ``REGISTRATION_WAIT_S``; then Ray's own call finds the node at once, or
    keeps its own wait and its own error. None when Ray has no ``get_node``.
    """
    if not callable(get_node):
        return None

    def get_node_once_registered(gcs_address: str, node_id: str, *args, **kwargs):
        wait_until_registered(gcs_address, node_id, REGISTRATION_WAIT_S)
        return get_node(gcs_address, node_id, *args, **kwargs)

    return get_node_once_registered


def wait_until_registered(gcs_address: str, node_id: str, timeout_s: float) -> bool:
    """Polls the GCS's node table until node ``node_id`` (hex) is alive there; False on timeout or any error."""
    from ray._private import services, state  # pylint: disable=g-import-not-at-top

    deadline = time.monotonic() + timeout_s
    table = state.GlobalState()
    try:
        table._initialize_global_state(services._get_gcs_client_options(gcs_address))  # pylint: disable=protected-access
        while True:
            if any(row.get("NodeID") == node_id and row.get("Alive") for row in table.node_table()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(REGISTRATION_POLL_S)
    except Exception:  # pylint: disable=broad-except
        return False  # Ray's get_node then waits and reports as it always did
    finally:
        try:
            table.disconnect()
        except Exception:  # pylint: disable=broad-except
            pass
