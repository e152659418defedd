"""``rlplat train <agent>``: one sub-command per agent, from the ``TRAINERS`` registry.

To add an agent, write ``rlplat/launch/train_<agent>.py`` with ``NAME``,
``HELP``, ``add_arguments`` and ``run`` (see ``train_supervised``) and list
it below.
"""

from __future__ import annotations

import argparse
import importlib

NAME = "train"
HELP = "train an agent"

TRAINERS = (
    "rlplat.launch.train_supervised",
    "rlplat.launch.train_d4pg",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    agents = parser.add_subparsers(title="agents", dest="agent", metavar="AGENT", required=True)
    for module_name in TRAINERS:
        module = importlib.import_module(module_name)
        sub = agents.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)


def run(args: argparse.Namespace) -> int:  # never reached: each agent sets its own `run`
    raise AssertionError(f"no agent handled {args}")
