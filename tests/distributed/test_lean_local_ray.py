"""A local Ray instance starts without the services a private instance never uses (start-up time).

``lean_local_ray.lean_services`` gives Ray's ``RayParams`` other defaults while
``ray.init`` starts the instance; ``lean_local_ray.SYSTEM_CONFIG`` turns off the idle
workers Ray would prestart for the first driver, no dashboard head starts, and
``ray.init`` asks Ray for its node only once the node is registered, and
the raylet's dashboard agent starts without its modules. The first
tests check the replacements without starting Ray; the last starts one
instance and looks at the processes it runs.
"""

import time

import psutil
import pytest
import ray
from ray._private import node
from ray._private import parameter
from ray._private import services

from rlplat.distributed import cluster
from rlplat.distributed import lean_local_ray


def test_lean_defaults_hold_inside_the_block_only_and_yield_to_explicit_values():
    original = parameter.RayParams
    with lean_local_ray.lean_services(log_to_driver=False):
        params = parameter.RayParams()
        assert params.dashboard_agent_listen_port == 0  # a free port, not the shared 52365
        assert params.no_monitor is True
        assert params.include_log_monitor is False
        assert parameter.RayParams(dashboard_agent_listen_port=52366).dashboard_agent_listen_port == 52366
        assert params.setup_worker_path.endswith("rlplat/distributed/lean_setup_worker.py")
        assert parameter.RayParams(setup_worker_path="/x/setup_worker.py").setup_worker_path == "/x/setup_worker.py"
    assert parameter.RayParams is original
    assert parameter.RayParams().setup_worker_path is None  # Ray's node then picks its own script
    with lean_local_ray.lean_services(log_to_driver=True):
        assert parameter.RayParams().include_log_monitor is True  # it forwards worker output
    assert parameter.RayParams().dashboard_agent_listen_port == 52365  # Ray's own default is back


def test_the_dashboard_head_is_skipped_inside_the_block_only():
    original = node.Node.start_api_server
    with lean_local_ray.lean_services(log_to_driver=False):
        assert node.Node.start_api_server is not original
        assert node.Node.start_api_server(None, include_dashboard=False, raise_on_failure=False) is None
    assert node.Node.start_api_server is original


def test_the_dashboard_agent_is_told_to_run_minimal_inside_the_block_only():
    from ray._private import utils  # pylint: disable=g-import-not-at-top

    original = utils.get_dashboard_dependency_error
    with lean_local_ray.lean_services(log_to_driver=False):
        assert isinstance(utils.get_dashboard_dependency_error(), ImportError)
    assert utils.get_dashboard_dependency_error is original


def test_the_dashboard_agents_command_gets_the_lean_script_inside_the_block_only():
    def agent_command():
        return services._build_python_executable_command_memory_profileable(  # pylint: disable=protected-access
            "dashboard_agent", "/tmp/session")

    plain = agent_command()
    with lean_local_ray.lean_services(log_to_driver=False):
        lean = agent_command()
        other = services._build_python_executable_command_memory_profileable(  # pylint: disable=protected-access
            "runtime_env_agent", "/tmp/session")
    assert lean[:-1] == plain and lean[-1].endswith("lean_dashboard_agent.py"), lean
    assert other == plain  # the other services' commands are Ray's own
    assert agent_command() == plain


def test_rays_get_node_is_wrapped_inside_the_block_only():
    original = services.get_node
    with lean_local_ray.lean_services(log_to_driver=False):
        assert services.get_node is not original
    assert services.get_node is original


@pytest.mark.multiprocess
def test_local_instance_runs_no_monitors_and_no_idle_prestarted_workers(monkeypatch):
    assert not ray.is_initialized()
    looks = []  # (node ID, registered when Ray's get_node was called)
    rays_get_node = services.get_node

    def get_node(gcs_address, node_id, *args, **kwargs):
        looks.append((node_id, lean_local_ray.wait_until_registered(gcs_address, node_id, timeout_s=0)))
        return rays_get_node(gcs_address, node_id, *args, **kwargs)

    monkeypatch.setattr(services, "get_node", get_node)
    connection = cluster.connect(num_cpus=2)
    try:
        # Ray's get_node, which rechecks once a second, found the raylet registered at its first look.
        assert looks and all(registered for _, registered in looks), looks
        assert not lean_local_ray.wait_until_registered(connection.address, "ab" * 28, timeout_s=0.1)
        time.sleep(3.0)  # prestarted workers would be up by now
        names = []
        for proc in psutil.Process().children(recursive=True):
            try:
                names.append(" ".join(proc.cmdline()))
            except psutil.Error:
                pass
        session = [n for n in names if connection.session_dir.rsplit("/", 1)[-1] in n or "ray::" in n]
        assert any("gcs_server" in n for n in names), names
        assert not [n for n in session if "log_monitor.py" in n or "autoscaler/_private/monitor.py" in n]
        # The raylet still starts its dashboard agent, with the command line of Ray's minimal install.
        assert any(n.startswith("ray::DashboardAgent") for n in names), names
        raylets = [n for n in names if "raylet/raylet" in n]
        assert len(raylets) == 1 and "--dashboard_agent_command=" in raylets[0], names
        agent_command = raylets[0].split("--dashboard_agent_command=", 1)[1].split(" --runtime_env_agent", 1)[0]
        assert "dashboard/agent.py" in agent_command and "--minimal" in agent_command, agent_command
        # ... run through lean_dashboard_agent, which lets it load none of the dashboard's modules.
        assert agent_command.split()[2].endswith("rlplat/distributed/lean_dashboard_agent.py"), agent_command
        with open(f"{connection.session_dir}/logs/dashboard_agent.log", encoding="utf-8") as f:
            agent_log = f.read()
        assert "Loaded 0 modules." in agent_log and "Get all modules by type" not in agent_log, agent_log[-2000:]
        assert not [n for n in names if "dashboard/dashboard.py" in n], names  # no dashboard head
        assert not [n for n in names if n.startswith("ray::IDLE")], names

        # Workers start through lean_setup_worker, which applies their runtime_env as Ray's script does.
        assert "lean_setup_worker.py" in raylets[0].split("--python_worker_command=", 1)[1].split(" --", 1)[0]

        @ray.remote(num_cpus=0)
        def ping():
            return "pong"

        assert ray.get(ping.remote(), timeout=120) == "pong"  # a worker still starts when asked for

        runtime_env = {"env_vars": {"RLPLAT_T_A": "1", "RLPLAT_T_B": "${RLPLAT_T_A}-${RLPLAT_T_X}"}}

        @ray.remote(num_cpus=0, runtime_env=runtime_env)
        def variables():
            import os  # pylint: disable=g-import-not-at-top,import-outside-toplevel

            return os.environ.get("RLPLAT_T_A"), os.environ.get("RLPLAT_T_B")

        assert ray.get(variables.remote(), timeout=120) == ("1", "1-")
    finally:
        cluster.disconnect(connection)
