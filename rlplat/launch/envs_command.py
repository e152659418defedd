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

    import os  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top

    try:
        names = [":".join(t) if isinstance(t, (tuple, list)) else t for t in list_tasks()]
        try:
            from envs import gym_adapter  # pylint: disable=g-import-not-at-top

            names += gym_adapter.list_gym_tasks()  # "gym:<id>" names
        except ImportError:  # gymnasium not installed (or a stand-in envs module)
            pass
        sys.stdout.write("\n".join(names) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # `rlplat envs | head`: the reader stopped early. Point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
