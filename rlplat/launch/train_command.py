"""``rlplat train <agent>``: one sub-command per registered agent.

Agents register an ``AgentSpec`` under the ``rlplat.agents`` entry points
(``rlplat.agent_spec``); ``agent_command`` makes each one a sub-command, so
adding an agent edits nothing here.
"""

from __future__ import annotations

import argparse

NAME = "train"
HELP = "train an agent"

def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rlplat.launch import agent_command  # pylint: disable=g-import-not-at-top
    from rlplat.launch import common  # pylint: disable=g-import-not-at-top

    try:
        specs = agent_command.agents()
    except common.UsageError as e:
        common.fail(str(e))
    agent_command.add_agent_subcommands(parser, specs)


def run(args: argparse.Namespace) -> int:  # never reached: each agent sets its own `run`
    raise AssertionError(f"no agent handled {args}")
