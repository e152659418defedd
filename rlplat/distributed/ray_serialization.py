"""Ray's serialization context without the addons of libraries the process has not imported.

Every Ray process builds a serialization context before it reads its first
call's arguments, and Ray's ``serialization_addons.apply`` then imports
pydantic and pyarrow to register their serializers, whether or not the
process will ever send a pydantic model or Arrow data. In a run's worker
logs (``-X importtime``) that was 0.13-0.27 CPU-s per worker: the learner's,
every actor's and the evaluator's start, on the learner's path to its first
step. rlplat's processes send neither.

``install()`` makes the addons run only where one of their libraries
(pydantic, pyarrow, starlette) is already imported, which is where they
could be in use. Idempotent; a Ray without that module is left as it is.
The driver installs it when it connects (``cluster.connect``); a worker, when
Ray loads its class, which comes before its arguments are read
(``workers/common.py``).
"""

from __future__ import annotations

import sys

ADDON_LIBRARIES = ("pydantic", "pyarrow", "starlette")


def install() -> None:
    """Replaces ``ray.util.serialization_addons.apply`` with one that skips a process without the libraries."""
    try:
        from ray.util import serialization_addons  # pylint: disable=g-import-not-at-top
    except ImportError:
        return
    full = getattr(serialization_addons, "apply", None)
    if not callable(full) or getattr(full, "rlplat_lean", False):
        return

    def apply(context) -> None:
        if any(name in sys.modules for name in ADDON_LIBRARIES):
            full(context)

    apply.rlplat_lean = True
    apply.full = full
    serialization_addons.apply = apply
