"""Layouts decide where an agent's pieces run; the agent (a builder) does not change.

``run_local``: everything in one process, for debugging and tests. The Ray
layout lives in ``rlplat.distributed.layout`` (the only package importing Ray).
"""

from rlplat.layouts.local import run_local

__all__ = ["run_local"]
