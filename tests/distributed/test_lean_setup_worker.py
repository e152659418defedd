"""``lean_setup_worker``: a worker's runtime_env applied as Ray's setup script applies it, without importing Ray.

The pure parts are checked against hand-worked cases; the script itself runs
in a fresh process, in front of a stand-in worker that reports its argv and
environment (tests/distributed/test_lean_local_ray.py checks a real
instance's workers).
"""

import json
import os
import subprocess
import sys

import pytest

from rlplat.distributed import lean_setup_worker

SCRIPT = lean_setup_worker.__file__


def test_variables_expand_in_order_from_the_environment_and_unknown_braced_names_are_dropped(monkeypatch):
    monkeypatch.setenv("RLPLAT_T_HOME", "/h")
    monkeypatch.delenv("RLPLAT_T_NOPE", raising=False)
    lean_setup_worker.set_env_vars({"RLPLAT_T_A": "1", "RLPLAT_T_B": "${RLPLAT_T_A}:$RLPLAT_T_HOME:${RLPLAT_T_NOPE}.",
                                    "RLPLAT_T_C": "$RLPLAT_T_NOPE"})
    assert os.environ["RLPLAT_T_A"] == "1"
    assert os.environ["RLPLAT_T_B"] == "1:/h:."  # an earlier variable is seen; an unknown ${NAME} is dropped
    assert os.environ["RLPLAT_T_C"] == "$RLPLAT_T_NOPE"  # as in Ray: only the braced form is dropped
    for name in ("RLPLAT_T_A", "RLPLAT_T_B", "RLPLAT_T_C"):
        monkeypatch.delenv(name)


def test_the_worker_command_execs_python_directly_or_through_bash_behind_a_prefix():
    passthrough = ["/ray/default_worker.py", "--node-ip-address=127.0.0.1", "a b"]
    assert lean_setup_worker.worker_command({}, passthrough) == [sys.executable, *passthrough]
    assert lean_setup_worker.worker_command({"py_executable": "/venv/bin/python",
                                             "override_worker_entrypoint": "/other/worker.py"}, passthrough) == [
        "/venv/bin/python", "/other/worker.py", "--node-ip-address=127.0.0.1", "a b"]
    assert lean_setup_worker.worker_command({"command_prefix": ["cd", "/w", "&&"], "py_executable": "/p"},
                                            passthrough) == [
        "bash", "-c", "cd /w && exec /p /ray/default_worker.py --node-ip-address=127.0.0.1 'a b'"]


@pytest.mark.parametrize("context, language, platform, expected", [
    ({}, "PYTHON", "linux", True),
    ({"env_vars": {"A": "1"}, "command_prefix": [], "py_executable": "/p", "override_worker_entrypoint": None,
      "java_jars": []}, "PYTHON", "linux", True),
    ({}, "JAVA", "linux", False),
    ({}, "CPP", "linux", False),
    ({}, "PYTHON", "darwin", False),
    ({"java_jars": ["/x.jar"]}, "PYTHON", "linux", False),
    ({"container": {"image": "x"}}, "PYTHON", "linux", False),  # a key of a later Ray: Ray's script applies it
    ({"env_vars": ["A=1"]}, "PYTHON", "linux", False),
    (None, "PYTHON", "linux", False),  # the JSON did not parse
])
def test_only_a_python_worker_on_linux_with_a_known_context_is_handled_here(context, language, platform, expected):
    assert lean_setup_worker.handles(context, language, platform) is expected


@pytest.mark.multiprocess
def test_rays_own_setup_script_is_found_without_importing_ray():
    found = subprocess.run([sys.executable, "-c", "import sys, runpy; "
                            f"m = runpy.run_path({SCRIPT!r}, run_name='probe'); "
                            "print(m['ray_setup_worker']()); print('ray' in sys.modules)"],
                           capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert found[0].endswith(os.path.join("ray", "_private", "workers", "setup_worker.py")) and os.path.isfile(found[0])
    assert found[1] == "False"


STAND_IN = """import json, os, sys
print(json.dumps({"argv": sys.argv, "a": os.environ.get("RLPLAT_T_A"), "b": os.environ.get("RLPLAT_T_B"),
                  "ray": "ray" in sys.modules}))
"""


@pytest.mark.multiprocess
def test_the_script_sets_the_variables_and_becomes_the_worker_with_its_arguments(tmp_path):
    worker = tmp_path / "stand_in_worker.py"
    worker.write_text(STAND_IN)
    context = {"env_vars": {"RLPLAT_T_A": "x", "RLPLAT_T_B": "${RLPLAT_T_A}y${RLPLAT_T_NOPE}"}}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPLAT_T_")}
    done = subprocess.run([sys.executable, SCRIPT, f"--serialized-runtime-env-context={json.dumps(context)}",
                           "--language=PYTHON", str(worker), "--node-ip-address=127.0.0.1", "--startup-token=3"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen["argv"] == [str(worker), "--node-ip-address=127.0.0.1", "--startup-token=3"]
    assert (seen["a"], seen["b"]) == ("x", "xy")
    assert seen["ray"] is False
    # With a command prefix it runs through bash, in the prefix's folder, the same worker and arguments.
    context["command_prefix"] = ["cd", str(tmp_path), "&&"]
    done = subprocess.run([sys.executable, SCRIPT, f"--serialized-runtime-env-context={json.dumps(context)}",
                           "--language=PYTHON", "stand_in_worker.py", "--x=a b"],
                          capture_output=True, text=True, timeout=60, env=env, cwd="/")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["argv"] == ["stand_in_worker.py", "--x=a b"]
