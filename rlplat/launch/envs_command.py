"""``rlplat envs``: print every task ``envs.make_environment`` can build."""

from __future__ import annotations

import argparse

NAME = "envs"
HELP = "list the available environment tasks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no flags yet


def run(args: argparse.Namespace) -> int:
    del args
    import rlplat_envs as envs  # pylint: disable=g-import-not-at-top  (lazy: loads dm_control)

    import os  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top

    try:
        names = [":".join(t) if isinstance(t, (tuple, list)) else t for t in envs.list_tasks()]
        # Asked of the envs package (not its gym module) so a stand-in package decides.
        names += getattr(envs, "list_gym_tasks", list)()
        sys.stdout.write("\n".join(names) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # `rlplat envs | head`: the reader stopped early. Point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
