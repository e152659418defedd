"""The agents ``rlplat train`` and ``rlplat sweep`` offer, found by entry point.

An agent registers its command module under the ``rlplat.agents`` entry-point
group of its distribution (``pyproject.toml``)::

    [project.entry-points."rlplat.agents"]
    d4pg = "rlplat_agents.d4pg.command"

so adding an agent edits nothing inside ``rlplat/``. A command module defines
``NAME`` (the entry point's name), ``HELP``, ``add_arguments(parser)``,
``run(args) -> exit code`` and ``CONFIG_CLASS`` (its frozen config
dataclass), and imports nothing heavy at module level. Agents trained by
actors on Ray also define ``prepare(args) -> (logdir, make_builder)``, which
``rlplat sweep`` uses, and ``BUILDER_NAME``, the class name their builder
records in ``run_info.json``. ``CONFIG_NESTED`` says whether the run's
``config.json`` holds the agent's config under ``"agent"`` (Ray runs, beside
the layout) or at its top level (in-process runs).
"""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType
from typing import Dict, Tuple

GROUP = "rlplat.agents"


class NoAgentsError(RuntimeError):
    """No agent is registered: rlplat is not installed as a distribution."""


def agent_modules() -> Dict[str, str]:
    """Agent name -> its command module's import path, sorted by name."""
    found = {ep.name: ep.value for ep in metadata.entry_points(group=GROUP)}
    if not found:
        raise NoAgentsError(f"no agents are registered under the {GROUP!r} entry points; install rlplat "
                            "with `pip install -e .` (scripts/setup.sh does)")
    return dict(sorted(found.items()))


def load(name: str) -> ModuleType:
    """The command module of agent ``name``; its ``NAME`` must be the registered name."""
    module = importlib.import_module(agent_modules()[name])
    if getattr(module, "NAME", None) != name:
        raise NoAgentsError(f"{module.__name__} is registered as agent {name!r} but its NAME is "
                            f"{getattr(module, 'NAME', None)!r}")
    return module


def commands() -> Dict[str, ModuleType]:
    """Every registered agent's command module, by name."""
    return {name: load(name) for name in agent_modules()}


def ray_commands() -> Dict[str, ModuleType]:
    """The agents trained by actors on Ray (those with ``prepare``), by name."""
    return {name: module for name, module in commands().items() if hasattr(module, "prepare")}


def config_classes() -> Dict[str, Tuple[type, bool]]:
    """Agent -> (config dataclass, whether config.json nests it under "agent")."""
    return {name: (module.CONFIG_CLASS, bool(getattr(module, "CONFIG_NESTED", False)))
            for name, module in commands().items()}


def builder_agents() -> Dict[str, str]:
    """Builder class name (as ``run_info.json`` records it) -> agent name."""
    return {module.BUILDER_NAME: name for name, module in commands().items()
            if getattr(module, "BUILDER_NAME", None)}
