"""``rlplat train <agent>``: one sub-command per registered agent.

Agents register their command modules under the ``rlplat.agents`` entry
points (see ``agent_registry``); adding one edits nothing here.
"""

from __future__ import annotations

import argparse

NAME = "train"
HELP = "train an agent"

def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rlplat.launch import agent_registry  # pylint: disable=g-import-not-at-top
    from rlplat.launch import common  # pylint: disable=g-import-not-at-top

    try:
        modules = agent_registry.agent_modules()
    except agent_registry.NoAgentsError as e:
        common.fail(str(e))
    common.add_subcommands(parser, modules.values(), title="agents", dest="agent")


def run(args: argparse.Namespace) -> int:  # never reached: each agent sets its own `run`
    raise AssertionError(f"no agent handled {args}")
