"""``rlplat envs``: print every task ``envs.make_environment`` can build."""

from __future__ import annotations

import argparse

NAME = "envs"
HELP = "list the available environment tasks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no flags yet


def run(args: argparse.Namespace) -> int:
    del args
    from envs import list_tasks  # pylint: disable=g-import-not-at-top  (lazy: loads dm_control)

    for task in list_tasks():
        print(":".join(task) if isinstance(task, (tuple, list)) else task)
    return 0
