"""The ``rlplat`` command line.

    rlplat envs
    rlplat train supervised [--num-replicas N] [--logdir DIR] [--resume] ...
    rlplat status --logdir RUN [--json] [--watch S]
    rlplat plot RUN [RUN...] [--metric eval_return] [--x env_steps] [-o curves.png] [--csv F]
    rlplat eval --logdir RUN [--checkpoint N] [--episodes 5] [--seed S] [--video out.mp4|out.gif]
    rlplat export --logdir RUN [--checkpoint N] -o DIR
    rlplat sweep d4pg|impala [train flags] --seeds N [--grid FIELD=V1,V2 ...]

Commands come from the ``COMMANDS`` registry (modules of ``rlplat.launch``).
TensorFlow is not imported until a command runs, after its flags are checked;
``TF_CPP_MIN_LOG_LEVEL`` defaults to 2 for the whole process.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything can import TensorFlow

import sys  # noqa: E402
from typing import Optional, Sequence  # noqa: E402

from rlplat.launch import common  # noqa: E402

COMMANDS = (
    "rlplat.launch.envs_command",
    "rlplat.launch.train_command",
    "rlplat.launch.cluster_command",
    "rlplat.launch.plot_command",
    "rlplat.launch.status_command",
    "rlplat.launch.eval_command",
    "rlplat.launch.export_command",
    "rlplat.launch.sweep_command",
    "rlplat.launch.scale_check_command",
)


def build_parser() -> common.Parser:
    parser = common.Parser(prog="rlplat", description="rlplat: distributed RL on Ray + tf.distribute")
    common.add_subcommands(parser, COMMANDS, title="commands", dest="command")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses ``argv`` (default ``sys.argv[1:]``), runs the command, returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except common.UsageError as e:
        common.fail(str(e))
    except KeyboardInterrupt as e:
        # A run's SIGTERM outside its driver (rl_run.Terminated) carries 143.
        sys.stderr.write("rlplat: interrupted\n")
        return getattr(e, "exit_code", common.EXIT_INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
