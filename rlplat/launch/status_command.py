"""``rlplat status --logdir RUN``: a run's health at a glance, live or ended.

Reads only what the run writes (see ``rlplat.utils.run_status``): roles and
their nodes, progress, env and learner steps/s, replay size and
samples-per-insert, policy lag, the last evaluation, the last checkpoint and
the ETA. ``--json`` prints the same as one JSON object; ``--watch S``
refreshes every S seconds until Ctrl-C or the run ends.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rlplat.launch import common

NAME = "status"
HELP = "show a run's health (roles, rates, replay, lag, last eval and checkpoint, ETA)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--logdir", required=True, metavar="RUN",
                        help="the run directory (`rlplat train --logdir`), live or ended")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                        help="refresh every SECONDS until the run ends (Ctrl-C stops watching)")


def run(args: argparse.Namespace) -> int:
    from rlplat.utils import run_status  # pylint: disable=g-import-not-at-top

    if args.watch is not None and not args.watch > 0:
        raise common.UsageError(f"--watch must be > 0 seconds (got {args.watch:g})")
    while True:
        try:
            status = run_status.read_status(args.logdir)
        except run_status.StatusError as e:
            raise common.UsageError(str(e)) from None
        if args.json:
            sys.stdout.write(json.dumps(status, default=str) + "\n")
        else:
            sys.stdout.write("\n".join(run_status.format_status(status)) + "\n")
        sys.stdout.flush()
        if args.watch is None or status["run"]["state"] != "live":
            return common.EXIT_OK
        time.sleep(args.watch)
        sys.stdout.write("\n")
