"""The run a read-only command (``eval``, ``export``) works on: ``--logdir`` and ``--checkpoint``.

Both commands open a finished or live run the same way: the run's files are
checked, its record read, the checkpoint looked up through the state file and
the agent's builder made from the recorded config. Every failure is a
``common.UsageError`` (one line, exit 2), raised before TensorFlow loads.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rlplat import run_dir
from rlplat.launch import common


def add_flags(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--logdir RUN`` and ``--checkpoint N``; ``verb`` says what the command does with it."""
    parser.add_argument("--logdir", required=True, metavar="RUN",
                        help="the run directory (`rlplat train --logdir`), live or ended")
    parser.add_argument("--checkpoint", type=int, default=None, metavar="N",
                        help=f"{verb} the checkpoint of learner step N, ckpt-N (default: the newest)")


def check_checkpoint_flag(args: argparse.Namespace) -> None:
    """``--checkpoint`` alone: a learner step is never negative."""
    if args.checkpoint is not None and args.checkpoint < 0:
        raise common.UsageError(f"--checkpoint is a learner step >= 0 (got {args.checkpoint})")


@dataclasses.dataclass(frozen=True)
class SavedRun:
    """A run opened at one checkpoint: its record, the step and prefix, and the agent's builder."""

    record: Any  # evaluation.RunRecord
    step: int
    prefix: str
    builder: Any


def open_run(args: argparse.Namespace) -> SavedRun:
    """Opens ``args.logdir`` at ``args.checkpoint`` (the newest when None), without TensorFlow."""
    from rlplat import evaluation  # pylint: disable=g-import-not-at-top  (no TF)

    check_checkpoint_flag(args)
    try:
        run_dir.check_run_files(args.logdir)
        record = evaluation.read_run(args.logdir)
        step, prefix = record.checkpoint(args.checkpoint)
        builder = evaluation.make_builder(record)
    except (evaluation.RunError, run_dir.RunDirError) as e:
        raise common.UsageError(str(e)) from None
    return SavedRun(record, step, prefix, builder)
