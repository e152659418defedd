"""The checks and run directory of a workload trained in the ``rlplat`` process itself.

Supervised-style agents (no actors, no Ray) share this: flags, ``--logdir``
and ``--resume`` are checked before TensorFlow starts, the run directory is
made only once every check passed and removed again if nothing was written.
"""

from __future__ import annotations

import argparse

from rlplat.launch import common
from rlplat.launch import preflight


def run_in_process(args: argparse.Namespace, agent: str, config, shape_fields, train) -> int:
    """The checks and run-directory handling of a workload trained in this process.

    ``train(args, config, logdir)`` runs it once every check passed (used by
    ``train supervised`` and ``train gan``).
    """
    logdir = common.check_run_flags(args, agent)
    if args.debug_eager and (args.num_replicas or 1) > 1:
        raise common.UsageError("--debug-eager runs on one device: drop --num-replicas")
    if args.num_replicas is not None:
        try:
            config.check_replicas(args.num_replicas)
        except ValueError as e:
            raise common.UsageError(str(e)) from None
    preflight.check_logdir(logdir, args.resume)
    if args.resume:
        preflight.check_resume(logdir, agent, config.to_dict(), shape_fields)
    # Created only now that every check passed (and before TF loads); removed
    # again if the run stops before writing anything into it.
    created = [] if args.resume else preflight.make_logdir(logdir)
    try:
        return train(args, config, logdir)
    finally:
        preflight.remove_if_empty(created)
