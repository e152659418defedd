"""``rlplat train <agent>``: one sub-command per agent, from the ``TRAINERS`` registry.

To add an agent, write ``rlplat/launch/train_<agent>.py`` with ``NAME``,
``HELP``, ``add_arguments`` and ``run`` (see ``train_supervised``) and list
it below.
"""

from __future__ import annotations

import argparse

NAME = "train"
HELP = "train an agent"

TRAINERS = (
    "rlplat.launch.train_supervised",
    "rlplat.launch.train_d4pg",
    "rlplat.launch.train_impala",
    "rlplat.launch.train_gan",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rlplat.launch import common  # pylint: disable=g-import-not-at-top

    common.add_subcommands(parser, TRAINERS, title="agents", dest="agent")


def run(args: argparse.Namespace) -> int:  # never reached: each agent sets its own `run`
    raise AssertionError(f"no agent handled {args}")
