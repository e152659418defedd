"""The checks and run directory of a workload trained in the ``rlplat`` process itself.

Supervised-style agents (no actors, no Ray) share this: flags, ``--logdir``
and ``--resume`` are checked before TensorFlow starts, the run directory is
made only once every check passed and removed again if nothing was written.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Mapping

from rlplat import run_dir
from rlplat.agent_spec import AgentSpec
from rlplat.launch import common
from rlplat.launch import preflight


def run_in_process(args: argparse.Namespace, spec: AgentSpec, config: Any) -> int:
    """The checks and run-directory handling of an agent trained in this process (``spec.train``).

    Its agent is recorded in ``run_info.json`` before training starts, so
    that ``--resume``, ``eval`` and ``status`` read it.
    """
    agent = spec.name
    logdir = common.check_run_flags(args, agent)
    if args.debug_eager and (args.num_replicas or 1) > 1:
        raise common.UsageError("--debug-eager runs on one device: drop --num-replicas")
    if args.num_replicas is not None:
        try:
            config.check_replicas(args.num_replicas)
        except ValueError as e:
            names = [f.name for f in dataclasses.fields(config)] + ["num_replicas"]
            raise common.UsageError(common.as_flags(str(e), names)) from None
    preflight.check_logdir(logdir, args.resume)
    if args.resume:
        preflight.check_resume(logdir, agent, config.to_dict(), spec.shapes(config))
    # Created only now that every check passed (and before TF loads); removed
    # again if the run stops before writing anything into it.
    created = [] if args.resume else preflight.make_logdir(logdir)
    try:
        with run_dir.RunLock(logdir):  # the one writer of this run directory
            if not args.resume:
                run_dir.record_agent(logdir, agent)
            return train(args, config, logdir, spec)
    except run_dir.RunDirLocked as e:
        raise common.UsageError(f"--logdir: {e}") from None
    finally:
        preflight.remove_if_empty(created)


def add_arguments(parser: argparse.ArgumentParser, agent: str, config_class: type,
                  config_flags: Mapping[str, str]) -> None:
    """The run flags, one flag per config field in ``config_flags``, and ``--debug-eager``."""
    common.add_run_flags(parser, agent)
    common.add_config_flags(parser, config_class, config_flags)
    parser.add_argument("--debug-eager", action="store_true",
                        help="run each step eagerly on one device through the same step function, "
                             "so a breakpoint() in it stops in this terminal; slow, for development")


def train(args: argparse.Namespace, config: Any, logdir: str, spec: AgentSpec) -> int:
    """TensorFlow set up for ``--num-replicas``, then the spec's ``train(...)``; prints its ``describe``."""
    common.setup_tensorflow(args.num_replicas)
    from rlplat.replication import ReplicationError  # pylint: disable=g-import-not-at-top

    print(f"{'resuming' if args.resume else 'run'} in {logdir}", flush=True)
    try:
        summary = spec.train_module().train(config, args.num_replicas, logdir, resume=args.resume,
                                            progress=args.progress, debug_eager=args.debug_eager)
    except ReplicationError as e:  # a device/cluster setting, found while building the strategy
        raise common.UsageError(str(e)) from None
    except FloatingPointError as e:  # the NaN guard stopped the run; the weights are still finite
        sys.stderr.write(f"rlplat: error: {e}; logs and checkpoints in {logdir}\n")
        return common.EXIT_FAILURE
    if spec.describe is not None:
        print(spec.describe({**summary, "logdir": logdir}), flush=True)
    return common.EXIT_OK
