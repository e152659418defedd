"""Keeps the servers of a LOCAL run on the loopback interface (LD_PRELOAD shim).

Ray binds its own servers to the node IP (127.0.0.1 for a local run, see
``cluster``), but two kinds of server inside Ray's workers take only a port:
dm-reverb's ``reverb.Server`` and TensorFlow's gRPC server (``--num-learner-
workers`` > 1). gRPC then listens on every interface. Neither has a
bind-address option, so the address is rewritten where they all end up:
``bind()``. ``loopback_bind.c`` (built by ``scripts/setup.sh`` into
``$VENV/lib/rlplat/loopback_bind.so``) turns a wildcard bind into a loopback
bind when ``RLPLAT_LOOPBACK_ONLY=1``.

``preloaded_children()`` puts the shim and the switch into this process's
environment while ``ray.init`` starts the local instance: the GCS, raylet and
agents inherit them, and the raylet hands them to every worker it starts
(``RAY_LD_PRELOAD_ON_WORKERS=1``: with ``0``, which Ray sets alongside its own
jemalloc preload, the raylet drops LD_PRELOAD from workers). The calling
process itself is not covered: a library is only preloaded when a program
starts. Cluster runs never use this: their nodes must reach each other.

No Ray import here, so ``rlplat.runners.local`` may use ``active_in_this_process``.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, Optional

SWITCH = "RLPLAT_LOOPBACK_ONLY"
SHIM_NAME = "loopback_bind.so"
# Overrides where the shim is looked for (e.g. a venv built elsewhere).
PATH_VARIABLE = "RLPLAT_LOOPBACK_SO"
# "0" makes the raylet strip LD_PRELOAD from workers (measured); "1" keeps it.
_WORKERS_VARIABLE = "RAY_LD_PRELOAD_ON_WORKERS"

_warned = False


def shim_path() -> Optional[str]:
    """The built shim: ``$RLPLAT_LOOPBACK_SO``, else ``<venv>/lib/rlplat/loopback_bind.so``; None if absent."""
    explicit = os.environ.get(PATH_VARIABLE)
    path = explicit or os.path.join(sys.prefix, "lib", "rlplat", SHIM_NAME)
    return path if os.path.isfile(path) else None


def child_environment() -> Dict[str, str]:
    """Variables that put processes started from now on behind the shim; {} if it is not built."""
    path = shim_path()
    if path is None:
        return {}
    preload = os.environ.get("LD_PRELOAD", "")
    if path not in preload.split():
        preload = f"{path} {preload}".strip()  # first, so its bind() is the one found
    return {"LD_PRELOAD": preload, SWITCH: "1", _WORKERS_VARIABLE: "1"}


def missing_warning() -> str:
    """The one line printed when a local run cannot be kept on loopback."""
    where = os.environ.get(PATH_VARIABLE) or os.path.join(sys.prefix, "lib", "rlplat", SHIM_NAME)
    return (f"rlplat: warning: {where} is missing, so this local run's Reverb and TensorFlow servers "
            "listen on all interfaces; run scripts/setup.sh (needs gcc) to build it")


class preloaded_children:  # pylint: disable=invalid-name
    """Processes started inside the block run behind the shim; the environment is restored after.

    If the shim is not built the block still runs (the run works, its
    servers are just not confined) and ONE warning line goes to stderr, once
    per process.
    """

    def __enter__(self):
        global _warned  # pylint: disable=global-statement
        self._saved = {}
        updates = child_environment()
        if not updates and not _warned:
            _warned = True
            sys.stderr.write(missing_warning() + "\n")
            sys.stderr.flush()
        for name, value in updates.items():
            self._saved[name] = os.environ.get(name)
            os.environ[name] = value
        return self

    def __exit__(self, *exc_info):
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        return False


def active_in_this_process() -> bool:
    """True if this process started behind the shim with the switch on."""
    if os.environ.get(SWITCH) != "1":
        return False
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return any(line.rstrip().endswith("/" + SHIM_NAME) for line in f)
    except OSError:
        return False
