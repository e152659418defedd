"""``rlplat train impala``: IMPALA (V-trace actor-critic), actors on Ray, replicated learner.

Same flags and outputs as ``rlplat train d4pg``: ``--num-actors``,
``--num-learner-replicas``, ``--address``, ``--max-actor-steps``, ``--logdir``
(TensorBoard, metrics.jsonl, checkpoints, run_info.json), ``--resume`` and the
live console line. Default environment: gym:CartPole-v1.
"""

from __future__ import annotations

import argparse
import os
import sys

from agents.impala.config import IMPALAConfig  # light: no TensorFlow
from rlplat.launch import common

NAME = "impala"
HELP = "IMPALA (V-trace actor-critic) with N Ray actors; discrete or continuous actions"
AGENT = "impala"
DEFAULT_ENV = "gym:CartPole-v1"
CONFIG_FLAGS = {
    "unroll_length": "transitions per unroll",
    "global_batch_size": "unrolls per learner step over all replicas",
    "discount": "per-step discount gamma",
    "learning_rate": "Adam learning rate",
    "entropy_cost": "weight of the entropy bonus",
    "baseline_cost": "weight of the value loss",
    "clip_rho_threshold": "V-trace rho-bar",
    "clip_c_threshold": "V-trace c-bar",
    "max_gradient_norm": "clip gradients to this global norm",
    "core": "network core: mlp or lstm",
    "layer_sizes": "MLP torso widths, comma-separated",
    "lstm_size": "LSTM units (with --core lstm)",
    "queue_size": "replay queue capacity in unrolls (actors block when it is full)",
    "variable_update_period": "actor steps between weight pulls",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default=DEFAULT_ENV, metavar="NAME",
                        help=f"gym:<id> or DOMAIN:TASK, see `rlplat envs` (default: {DEFAULT_ENV})")
    parser.add_argument("--num-actors", type=int, default=2, metavar="N",
                        help="Ray actors stepping environments (default: 2)")
    parser.add_argument("--num-learner-replicas", type=int, default=None, metavar="K",
                        help="learner replicas: every GPU of the learner node by default, 1 on CPU "
                             "(K > 1 on CPU uses K logical CPU devices)")
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                        help="Ray cluster to join (default: start a local Ray instance)")
    parser.add_argument("--max-actor-steps", type=int, default=None, metavar="STEPS",
                        help="stop after this many environment steps over all actors (default: run "
                             "until interrupted)")
    parser.add_argument("--seed", type=int, default=0, help="global seed; actor i uses a seed derived from it")
    parser.add_argument("--logdir", default=None, metavar="DIR",
                        help=f"run directory (default: runs/{AGENT}-<timestamp>); required with --resume")
    parser.add_argument("--resume", action="store_true", help="continue the run in --logdir")
    parser.add_argument("--action-repeat", type=int, default=1, metavar="N",
                        help="environment steps per agent action (default: 1)")
    parser.add_argument("--eval-period", type=float, default=30.0, metavar="SECONDS",
                        help="seconds between evaluation episodes with the greedy policy (default: 30)")
    parser.add_argument("--checkpoint-period", type=float, default=300.0, metavar="SECONDS",
                        help="seconds between checkpoints (default: 300)")
    parser.add_argument("--max-policy-lag", type=int, default=None, metavar="STEPS",
                        help="drop unrolls more than this many learner steps behind (counted as "
                             "dropped_unrolls; default: keep all)")
    parser.add_argument("--target-eval-return", type=float, default=None, metavar="RETURN",
                        help="stop once an evaluation reaches this mean return (default: never)")
    common.add_config_flags(parser, IMPALAConfig, CONFIG_FLAGS)


def check_args(args: argparse.Namespace) -> str:
    """Every flag that can be wrong is checked here, before Ray or TF start."""
    if args.num_actors < 1:
        raise common.UsageError(f"--num-actors must be >= 1 (got {args.num_actors})")
    if args.num_learner_replicas is not None and args.num_learner_replicas < 1:
        raise common.UsageError(f"--num-learner-replicas must be >= 1 (got {args.num_learner_replicas})")
    if args.max_actor_steps is not None and args.max_actor_steps < 1:
        raise common.UsageError(f"--max-actor-steps must be >= 1 (got {args.max_actor_steps}); "
                                "leave it out to run until interrupted")
    if args.action_repeat < 1:
        raise common.UsageError(f"--action-repeat must be >= 1 (got {args.action_repeat})")
    if args.eval_period <= 0 or args.checkpoint_period <= 0:
        raise common.UsageError("--eval-period and --checkpoint-period must be > 0 seconds")
    if args.address not in (None, "auto") and not _looks_like_host_port(args.address):
        raise common.UsageError(f"--address must be 'auto' or HOST:PORT (got {args.address!r}); "
                                "e.g. --address 127.0.0.1:6379")
    from envs import suite  # pylint: disable=g-import-not-at-top  (no TF)

    try:
        suite.check_name(args.env)
    except ValueError as e:
        raise common.UsageError(str(e)) from None
    logdir = common.check_run_flags(
        argparse.Namespace(num_replicas=args.num_learner_replicas, resume=args.resume, logdir=args.logdir), AGENT)
    if args.resume and not os.path.isdir(logdir):
        raise common.UsageError(f"--resume: no run directory {logdir!r}; check --logdir")
    return logdir


def _looks_like_host_port(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def make_config(args: argparse.Namespace) -> IMPALAConfig:
    """The frozen config from the flags; bad values become a one-line UsageError."""
    config = common.config_from_args(IMPALAConfig, args, CONFIG_FLAGS)
    if args.max_policy_lag is not None:
        try:
            config = config.replace(max_policy_lag=args.max_policy_lag)
        except ValueError as e:
            raise common.UsageError(str(e)) from None
    if args.num_learner_replicas and config.global_batch_size % args.num_learner_replicas:
        raise common.UsageError(
            f"--global-batch-size {config.global_batch_size} must be a multiple of "
            f"--num-learner-replicas {args.num_learner_replicas}")
    return config


def run(args: argparse.Namespace) -> int:
    """Parsed flags -> ``run_on_ray`` -> exit code (0 done, 1 run failed, 2 usage, 130/143 signal)."""
    logdir = check_args(args)
    config = make_config(args)
    # These import Ray; usage errors above are reported before paying for that.
    from agents.impala.builder import IMPALABuilder  # pylint: disable=g-import-not-at-top
    from rlplat.distributed import cluster  # pylint: disable=g-import-not-at-top
    from rlplat.distributed.errors import RunFailedError, RunInterrupted  # pylint: disable=g-import-not-at-top
    from rlplat.distributed.layout import RayLayoutConfig, run_on_ray  # pylint: disable=g-import-not-at-top

    env_kwargs = {"action_repeat": args.action_repeat} if args.action_repeat != 1 else {}
    knobs = RayLayoutConfig(eval_every_actor_steps=0, eval_every_s=args.eval_period,
                            checkpoint_every_s=args.checkpoint_period,
                            target_eval_return=args.target_eval_return)
    print(f"{'resuming' if args.resume else 'run'} in {logdir}", flush=True)
    try:
        summary = run_on_ray(IMPALABuilder(config=config), args.env, env_kwargs,
                             num_actors=args.num_actors, num_learner_replicas=args.num_learner_replicas,
                             max_actor_steps=args.max_actor_steps, logdir=logdir, seed=args.seed,
                             resume=args.resume, address=args.address, layout=knobs)
    except (ValueError, cluster.ClusterConnectionError) as e:
        raise common.UsageError(str(e)) from None
    except RunFailedError as e:
        sys.stderr.write(f"rlplat: error: {e}\n")
        return common.EXIT_FAILURE
    except RunInterrupted as e:
        sys.stderr.write(f"rlplat: {e}; logs and checkpoints in {logdir}\n")
        return e.exit_code
    eval_return = summary["eval_return"]
    print(f"done: {summary['actor_steps']:,} actor steps, {summary['learner_steps']:,} learner steps, "
          f"final eval return {'-' if eval_return is None else f'{eval_return:.1f}'}; logs in {logdir}",
          flush=True)
    return common.EXIT_OK
