"""``rlplat cluster check FILE [FILE...]``: check ``ray up`` cluster YAMLs offline.

Prints ``FILE: ok`` on stdout for each good file and ``FILE: error: <one line>``
on stderr for each bad one (the first problem, with a count of the others);
exits 0 when every file is fine, else 2. Runs Ray's own validation
(``prepare_config`` + ``validate_config``) and rlplat's rules
(rlplat/clusters/); needs no cloud credentials and never imports
TensorFlow.
"""

from __future__ import annotations

import argparse
import sys

from rlplat.launch import common

NAME = "cluster"
HELP = "work with `ray up` cluster configurations (clusters/*.yaml)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(title="actions", dest="action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check", help="validate cluster YAMLs offline, with Ray's validator and rlplat's rules",
        description="Validate cluster YAMLs offline: Ray's prepare_config + validate_config, then "
                    "rlplat's rules (worker counts, provider keys, learner/actor resources, firewall, "
                    "token auth, pinned installs). Exit 0 if all are ok, else 2.")
    check.add_argument("files", nargs="+", metavar="FILE", help="cluster YAML, e.g. clusters/aws.yaml")
    check.set_defaults(run=run_check)


def run(args: argparse.Namespace) -> int:  # never reached: each action sets its own `run`
    raise AssertionError(f"no action handled {args}")


def run_check(args: argparse.Namespace) -> int:
    from rlplat.clusters import check as cluster_config  # pylint: disable=g-import-not-at-top  (lazy: it loads Ray)

    failed = 0
    for path in args.files:
        problems = cluster_config.check_cluster_config(path)
        if problems:
            failed += 1
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            sys.stderr.write(f"{path}: error: {problems[0]}{more}\n")
        else:
            sys.stdout.write(f"{path}: ok\n")
    sys.stdout.flush()
    return common.EXIT_USAGE if failed else common.EXIT_OK
