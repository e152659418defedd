"""``rlplat status --logdir RUN | --address HOST:PORT``: a run's health at a glance, live or ended.

``--logdir`` reads only what the run writes (see ``rlplat.utils.run_status``):
roles and their nodes, progress, env and learner steps/s, replay size and
samples-per-insert, policy lag, the last evaluation, the last checkpoint and
the ETA. ``--address`` joins the Ray cluster (token authentication, as
``rlplat train --address``) and shows the same snapshot for every run its
drivers published there (``rlplat.distributed.status_board``, refreshed every
10 s and at the end), from a machine that cannot see the logdir; with
``--logdir`` too, only that run. ``--json`` prints the same as JSON;
``--watch S`` refreshes every S seconds until Ctrl-C or the run ends.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from rlplat.launch import common

NAME = "status"
HELP = "show a run's health (roles, rates, replay, lag, last eval and checkpoint, ETA)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--logdir", default=None, metavar="RUN",
                        help="the run directory (`rlplat train --logdir`), live or ended; with "
                             "--address, picks that run among the cluster's")
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                        help="read the status the runs on this Ray cluster published (works from any "
                             "machine that can join it, token authentication required)")
    parser.add_argument("--allow-unauthenticated-ray", action="store_true",
                        help="with --address: join a cluster that does not require token authentication")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                        help="refresh every SECONDS until the run ends (Ctrl-C stops watching)")


def run(args: argparse.Namespace) -> int:
    from rlplat.utils import run_status  # pylint: disable=g-import-not-at-top

    if args.watch is not None and not args.watch > 0:
        raise common.UsageError(f"--watch must be > 0 seconds (got {args.watch:g})")
    if args.logdir is None and args.address is None:
        raise common.UsageError("pass --logdir RUN (a run directory) or --address HOST:PORT "
                                "(the Ray cluster the run is on)")
    if args.address not in (None, "auto") and not common.looks_like_host_port(args.address):
        raise common.UsageError(f"--address must be 'auto' or HOST:PORT (got {args.address!r}); "
                                "e.g. --address 127.0.0.1:6379")
    if args.allow_unauthenticated_ray and args.address is None:
        raise common.UsageError("--allow-unauthenticated-ray only applies with --address; drop it")
    if args.address is not None:
        return _run_on_cluster(args)
    while True:
        try:
            status = run_status.read_status(args.logdir)
        except run_status.StatusError as e:
            raise common.UsageError(str(e)) from None
        _show([status], args.json)
        if args.watch is None or status["run"]["state"] != "live":
            return common.EXIT_OK
        time.sleep(args.watch)
        sys.stdout.write("\n")


def _show(statuses, as_json: bool) -> None:
    from rlplat.utils import run_status  # pylint: disable=g-import-not-at-top

    for i, status in enumerate(statuses):
        if as_json:
            sys.stdout.write(json.dumps(status, default=str) + "\n")
            continue
        lines = run_status.format_status(status)
        if status.get("published") is not None:
            lines.append(f"snapshot published {time.time() - status['published']:.0f}s ago by the "
                         "run's driver" + (f"; stopped because: {status['stop_reason']}"
                                           if status.get("stop_reason") else ""))
        sys.stdout.write(("\n" if i else "") + "\n".join(lines) + "\n")
    sys.stdout.flush()


def _run_on_cluster(args: argparse.Namespace) -> int:
    from rlplat.distributed import cluster  # pylint: disable=g-import-not-at-top
    from rlplat.distributed import status_board  # pylint: disable=g-import-not-at-top

    try:
        connection = cluster.connect(args.address, allow_unauthenticated=args.allow_unauthenticated_ray)
    except (cluster.ClusterConnectionError, ValueError) as e:
        raise common.UsageError(str(e)) from None
    warned = set()

    def warn_once(line: str) -> None:  # --watch reads the board again and again
        if line not in warned:
            warned.add(line)
            sys.stderr.write(line + "\n")

    try:
        while True:
            statuses = status_board.read_all(on_skip=warn_once)
            if args.logdir is not None:
                wanted = os.path.abspath(args.logdir)
                statuses = [s for s in statuses if s.get("logdir") in (args.logdir, wanted)]
            if not statuses:
                which = f" for --logdir {args.logdir}" if args.logdir else ""
                raise common.UsageError(
                    f"no rlplat run on the Ray cluster at {connection.address} published its status"
                    f"{which}; check --address (runs publish every 10 s once their learner is up)")
            _show(statuses, args.json)
            if args.watch is None or all(s["run"]["state"] != "live" for s in statuses):
                return common.EXIT_OK
            time.sleep(args.watch)
            sys.stdout.write("\n")
    finally:
        cluster.disconnect(connection)
