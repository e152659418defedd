"""The first step of each worker of a local instance started by ``lean_services``: its environment, then the worker.

The raylet starts every Python worker as ``python <setup script>
--serialized-runtime-env-context=... --language=PYTHON default_worker.py
...``. Ray's setup script (``ray/_private/workers/setup_worker.py``) reads
the runtime_env's context (a JSON object: environment variables, a command
prefix, the Python to use, an entry point to put first), sets the
variables and replaces itself with the worker. To do that it imports a
large part of Ray (its services, logging and protobuf modules): 0.55-0.74
CPU-s in a fresh process on 2 cores, in every worker, before the worker
itself imports Ray.
Every rlplat learner, actor and evaluator starts through it, and each has
a runtime_env of its role, so on a local run this was on the learner's path
to its first step and took CPU from the rest of the start-up.

This script does the same with the standard library alone: the same
arguments, the same variables (``${NAME}`` expanded from the environment,
unknown names dropped), the same command. Anything it does not know (a
worker that is not Python, a context with keys it has not seen, a platform
other than Linux) is handed to Ray's own script, with the same arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import sys
from typing import List, Optional

# The keys of Ray's RuntimeEnvContext this script knows how to apply.
KNOWN_CONTEXT_KEYS = frozenset({"command_prefix", "env_vars", "py_executable", "override_worker_entrypoint",
                                "java_jars"})


def ray_setup_worker() -> Optional[str]:
    """The path of Ray's own setup script, found without importing Ray; None without Ray."""
    spec = importlib.util.find_spec("ray")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "_private", "workers", "setup_worker.py")


def set_env_vars(env_vars: dict) -> None:
    """Sets the runtime_env's variables as Ray does, in order: ``$NAME``/``${NAME}`` expanded from the
    environment so far (earlier variables included), unknown ``${NAME}`` dropped."""
    for key, value in env_vars.items():
        os.environ[key] = re.sub(r"\$\{[A-Z0-9_]+\}", "", os.path.expandvars(value))


def worker_command(context: dict, passthrough: List[str]) -> List[str]:
    """The command that replaces this process for a Python worker: ``argv`` to exec (see ``main``)."""
    passthrough = list(passthrough)
    entrypoint = context.get("override_worker_entrypoint")
    if entrypoint and passthrough:
        passthrough[0] = entrypoint
    python = context.get("py_executable") or sys.executable
    prefix = list(context.get("command_prefix") or [])
    if not prefix:
        return [python, *passthrough]
    # A prefix is shell (``cd dir &&``, an activation), so it runs through bash as in Ray.
    return ["bash", "-c", " ".join([*prefix, "exec", python, *(shlex.quote(a) for a in passthrough)])]


def _parse(argv: List[str]):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--serialized-runtime-env-context", type=str)
    parser.add_argument("--language", type=str)
    return parser.parse_known_args(argv)


def handles(context, language: Optional[str], platform: str = sys.platform) -> bool:
    """Whether this script applies ``context`` itself: a Python worker on Linux, a context of known keys.

    Otherwise ``main`` hands the arguments to Ray's own setup script.
    """
    return (isinstance(context, dict) and set(context) <= KNOWN_CONTEXT_KEYS and not context.get("java_jars")
            and isinstance(context.get("env_vars") or {}, dict)
            and isinstance(context.get("command_prefix") or [], list)
            and language == "PYTHON" and platform.startswith("linux"))


def main(argv: List[str]) -> None:
    """Applies the context in ``argv`` and execs the worker, or execs Ray's setup script with ``argv``."""
    args, passthrough = _parse(argv)
    try:
        context = json.loads(args.serialized_runtime_env_context or "{}")
    except ValueError:
        context = None
    if not handles(context, args.language):
        os.execv(sys.executable, [sys.executable, ray_setup_worker(), *argv])
    set_env_vars(context.get("env_vars") or {})
    command = worker_command(context, passthrough)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
