"""Flags, checks and the run loop shared by the actor-learner agents (D4PG, DDPG, IMPALA).

Every RL agent takes the same run flags (where to run, how long, logs,
placement); only its config flags and its builder differ (``agent_command``
adds both from its ``AgentSpec``). Before Ray: ``check_run_args`` (the flags
no object checks), the agent's config, ``describe_run`` (the ``Experiment``
and ``RayLayoutConfig``, each checked by its own rules, which raise in field
names that ``common.as_flags`` spells as flags), ``check_run_dir``
(``--logdir``, ``--resume`` against the run) and ``check_env``; then
``run_agent``.

Every bad input is refused by these checks with one line and exit code 2
before Ray starts and before the run directory is created: cheap checks
first, the environment (dm_control, ~2 s) last.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
from typing import Any, Dict, List, NamedTuple, Sequence

from rlplat.distributed import process  # environment settings only: no Ray, no TensorFlow
from rlplat.launch import common
from rlplat.launch import preflight


def add_run_flags(parser: argparse.ArgumentParser, agent: str, default_env: str,
                  env_help: str) -> None:
    """Adds the run flags every actor-learner trainer takes."""
    parser.add_argument("--env", default=default_env, metavar="NAME",
                        help=f"{env_help}, see `rlplat envs` (default: {default_env})")
    parser.add_argument("--num-actors", type=int, default=2, metavar="N",
                        help="Ray actors stepping environments (default: 2)")
    parser.add_argument("--num-learner-replicas", type=int, default=None, metavar="K",
                        help="learner replicas: every GPU of the learner node by default, 1 on CPU "
                             "(K > 1 on CPU uses K logical CPU devices)")
    parser.add_argument("--num-learner-workers", type=int, default=1, metavar="W",
                        help="learner processes under MultiWorkerMirroredStrategy, one per node on a "
                             "cluster; each samples global-batch-size/W per step and only worker 0 "
                             "keeps checkpoints (default: 1)")
    parser.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                        help="Ray cluster to join (default: start a local Ray instance); it must "
                             "require Ray token authentication")
    parser.add_argument("--allow-unauthenticated-ray", action="store_true",
                        help="with --address: join a cluster that does not require token "
                             "authentication (anyone who reaches it can run code on it)")
    parser.add_argument("--max-actor-steps", type=int, default=None, metavar="STEPS",
                        help="stop after this many environment steps over all actors (default: run "
                             "until interrupted; --resume keeps the run's budget)")
    parser.add_argument("--seed", type=int, default=0,
                        help="global seed; actor i uses a seed derived from it")
    parser.add_argument("--logdir", default=None, metavar="DIR",
                        help=f"run directory (default: runs/{agent}-<timestamp>); required with --resume")
    parser.add_argument("--resume", action="store_true", help="continue the run in --logdir")
    parser.add_argument("--replay-checkpoint", action=argparse.BooleanOptionalAction, default=None,
                        help="save replay (Reverb's tables) with every checkpoint, into "
                             "<logdir>/replay_checkpoints, and restore it on --resume so learning "
                             "goes on without refilling (default: off; --resume keeps the run's setting)")
    parser.add_argument("--action-repeat", type=int, default=1, metavar="N",
                        help="environment steps per agent action (default: 1)")
    parser.add_argument("--eval-period", type=float, default=None, metavar="SECONDS",
                        help="seconds between evaluations with the greedy policy (default: 30; "
                             "--resume keeps the run's)")
    parser.add_argument("--eval-every-steps", type=int, default=None, metavar="STEPS",
                        help="evaluate every STEPS actor steps instead of every --eval-period "
                             "seconds: learning curves then do not depend on machine speed")
    parser.add_argument("--envs-per-actor", type=int, default=1, metavar="K",
                        help="environments each actor process steps side by side, with one policy call "
                             "for all K (each has its own exploration and replay stream, like K separate "
                             "actors; feed-forward policies) (default: 1)")
    parser.add_argument("--num-replay-shards", type=int, default=1, metavar="S",
                        help="Reverb servers, each in its own process: actor i writes to shard i %% S and "
                             "every learner batch takes an equal share from each, so samples-per-insert "
                             "holds for the whole run; --num-actors must be a multiple of S (default: 1)")
    parser.add_argument("--weight-publish-period", type=int, default=1, metavar="STEPS",
                        help="learner steps between two published policy versions, which actors act on: "
                             "larger bounds how often weights cross the network, at the price of actors "
                             "acting on older weights (the lag shows in the status line) (default: 1)")
    parser.add_argument("--weights-per-actor", action="store_true",
                        help="actors on other nodes each pull every policy version over Ray, instead of "
                             "one copy per node through Ray's object store (for comparison)")
    parser.add_argument("--weight-relay", action="store_true",
                        help="one relay process on each actor node fetches every policy version and puts "
                             "it in the node's shared memory, where its actors read it: the learner answers "
                             "one call per node instead of one per actor (default: an object reference "
                             "per version, which each actor resolves from its node's object store)")
    parser.add_argument("--debug-eager", action="store_true",
                        help="run each learner step eagerly on one device through the same step "
                             "function, so a breakpoint() in it stops there (attach with `ray debug`); "
                             "slow, for development")
    parser.add_argument("--video-every", type=int, default=None, metavar="K",
                        help="render the first episode of every K-th evaluation (and of the final "
                             "one) to <logdir>/videos/eval-<steps>.mp4 and TensorBoard's Images tab; "
                             "control-suite tasks only (default: 0, no video)")
    parser.add_argument("--eval-episodes", type=int, default=None, metavar="N",
                        help="greedy episodes per evaluation (default: 5)")
    parser.add_argument("--checkpoint-period", type=float, default=None, metavar="SECONDS",
                        help="seconds between checkpoints (default: 300)")
    parser.add_argument("--target-eval-return", type=float, default=None, metavar="RETURN",
                        help="stop once an evaluation reaches this mean return (default: never)")
    common.add_placement_flags(parser)


# Experiment fields whose flag is not the field's own name; every other field
# of Experiment, RayLayoutConfig and the agent's config is its flag with dashes.
RENAMED_FIELDS = {"eval_every_actor_steps": "--eval-every-steps", "eval_every_s": "--eval-period",
                  "checkpoint_every_s": "--checkpoint-period", "video_every_evals": "--video-every",
                  "logdir": "--logdir", "resume": "--resume"}


class PreparedRun(NamedTuple):
    """A run every check passed: where it writes, what it is, where it runs."""

    logdir: str
    experiment: Any
    layout: Any


def check_run_args(args: argparse.Namespace, agent: str) -> str:
    """The run flags that have no object to check them, before Ray or TF start; returns the logdir.

    Fills the run settings no flag gave (``resolve_run_settings``). The
    values themselves are checked where they live, by ``describe_run``.

    Raises:
      common.UsageError: one line naming the flag to fix.
    """
    resolve_run_settings(args)
    if args.eval_every_steps is not None and args.eval_every_steps < 1:
        raise common.UsageError(f"--eval-every-steps must be >= 1 (got {args.eval_every_steps}); "
                                "leave it out to evaluate every --eval-period seconds")
    allocator_problem = process.allocator_setting_problem()
    if allocator_problem:
        raise common.UsageError(allocator_problem)
    logdir = common.run_logdir(args.logdir, args.resume, agent)
    if args.replay_checkpoint is None:  # a resumed run keeps what config.json recorded
        args.replay_checkpoint = args.resume and preflight.stored_replay_checkpoint(logdir)
    return logdir


def describe_run(args: argparse.Namespace, logdir: str, builder: Any) -> PreparedRun:
    """The ``Experiment`` and ``RayLayoutConfig`` the flags describe, each checked by its own rules.

    Imports no Ray and no TensorFlow. The objects raise in their field names;
    here those become flags.

    Raises:
      common.UsageError: one line naming the flag to fix.
    """
    from rlplat.distributed.layout_config import RayLayoutConfig  # pylint: disable=g-import-not-at-top  (no Ray)
    from rlplat.runners.on_ray import check_run  # pylint: disable=g-import-not-at-top  (no Ray)

    try:
        layout = RayLayoutConfig(**layout_kwargs_from_args(args))
        experiment = experiment_from_args(args, logdir, builder)
        check_run(experiment, layout)
    except ValueError as e:
        raise common.UsageError(run_flags(str(e))) from None
    return PreparedRun(logdir, experiment, layout)


def run_flags(message: str) -> str:
    """``message``, raised in ``Experiment``'s or the layout's field names, in flags."""
    from rlplat.distributed.layout_config import RayLayoutConfig  # pylint: disable=g-import-not-at-top  (no Ray)
    from rlplat.experiment import Experiment  # pylint: disable=g-import-not-at-top

    names = {f.name for cls in (RayLayoutConfig, Experiment) for f in dataclasses.fields(cls)}
    names = names - {"builder", "environment"} | {"global_batch_size"}  # check_run names the batch
    return common.as_flags(message, names, RENAMED_FIELDS)


def check_run_dir(args: argparse.Namespace, logdir: str, agent: str, config: Any,
                  shape_fields: Sequence[str], replay_fields: Sequence[str] = ()) -> None:
    """``--logdir`` and ``--resume`` against the run directory, last of the cheap checks.

    Raises:
      common.UsageError: the directory cannot be used, or ``--resume``
        changes the agent, ``--env`` or a network-shape flag
        (``shape_fields``) of the run in ``logdir``, or, restoring a replay
        checkpoint, a flag its tables were built from (``replay_fields``).
    """
    preflight.check_logdir(logdir, args.resume)
    if args.resume:
        preflight.check_resume(logdir, agent, config.to_dict(), shape_fields, env=args.env)
        if args.replay_checkpoint:
            preflight.check_replay_resume(logdir, config.to_dict(), replay_fields)


def check_env(name: str, agent: str, continuous_actions: bool = False) -> None:
    """Checks ``--env``: a known task, and (for gym) one the adapter and the agent can use.

    A ``gym:<id>`` environment is built once (gymnasium only: fast, no
    TensorFlow) to see its spaces; control-suite tasks always have bounded
    continuous actions and are not built.

    Raises:
      common.UsageError: unknown name (with the closest ones), unsupported
        spaces, or discrete actions for an agent that needs continuous ones.
    """
    from rlplat_envs import suite  # pylint: disable=g-import-not-at-top  (dm_control, no TF)

    try:
        suite.check_name(name)
    except ValueError as e:
        raise common.UsageError(str(e)) from None
    if not name.startswith("gym:"):
        return
    import warnings  # pylint: disable=g-import-not-at-top

    import rlplat_envs as envs  # pylint: disable=g-import-not-at-top
    from dm_env import specs  # pylint: disable=g-import-not-at-top

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # gymnasium's deprecation notes are not errors
            environment = envs.make_environment(name, seed=0)
            try:
                actions = environment.action_spec()
            finally:
                environment.close()
    except ValueError as e:
        raise common.UsageError(f"--env {name}: {e}") from None
    if continuous_actions and isinstance(actions, specs.DiscreteArray):
        raise common.UsageError(
            f"{agent.upper()} needs continuous actions, but --env {name} has {actions.num_values} "
            f"discrete actions; train it with `rlplat train impala --env {name}`, or pick a continuous task "
            "such as cartpole:swingup or gym:Pendulum-v1")


def run_agent(args: argparse.Namespace, prepared: PreparedRun) -> int:
    """Runs a prepared run under ``run_on_ray``; returns the exit code.

    Exit codes: 0 done, 1 run failed, 2 usage (raised as UsageError), 130/143
    interrupted by SIGINT/SIGTERM (logs and checkpoints kept). While the
    driver runs it owns both signals (final checkpoint, see ``driver.Driver``);
    before and after it, SIGTERM unwinds like Ctrl-C (``Terminated``) so the
    exit code is 143 and an empty run directory is removed.
    """
    logdir = prepared.logdir
    # Created only now that every check passed (and before TF and Ray load);
    # removed again if the run stops before writing anything into it.
    created = [] if args.resume else preflight.make_logdir(logdir)
    saved = _unwind_on_sigterm()
    try:
        summary = _run_on_ray(args, prepared)
    finally:
        preflight.remove_if_empty(created)
        if saved is not None:
            signal.signal(signal.SIGTERM, saved)
    if isinstance(summary, int):
        return summary
    eval_return = summary["eval_return"]
    print(f"done: {summary['actor_steps']:,} actor steps, {summary['learner_steps']:,} learner steps, "
          f"final eval return {'-' if eval_return is None else f'{eval_return:.1f}'}; logs in {logdir}",
          flush=True)
    print("\n".join(next_steps(logdir, summary, getattr(args, "env", ""))), flush=True)
    return common.EXIT_OK


def next_steps(logdir: str, summary: Dict[str, Any], env: str = "") -> List[str]:
    """Where a finished run's results are, and the commands that show them.

    Gym tasks are not rendered (``rlplat eval`` refuses ``--video`` there).
    """
    reason = summary.get("stop_reason")
    lines = [f"stopped because: {reason}" if reason else "stopped",
             f"checkpoint: {summary.get('checkpoint') or '-'}",
             f"curves:     rlplat plot {logdir} -o {os.path.join(logdir, 'curves.png')}",
             f"status:     rlplat status --logdir {logdir}",
             f"watch it:   rlplat eval --logdir {logdir} --episodes 3" + (
                 "" if str(env).startswith("gym:") else
                 f" --video {os.path.join(logdir, 'policy.mp4')}"),
             f"tensorboard --logdir {os.path.join(logdir, 'tb')}"]
    return lines


class Terminated(KeyboardInterrupt):
    """SIGTERM outside the driver: unwinds like Ctrl-C; the CLI exits with ``exit_code``."""

    exit_code = 128 + signal.SIGTERM

    def __init__(self):
        super().__init__("interrupted by SIGTERM")


def _raise_terminated(signum, frame) -> None:
    del signum, frame
    raise Terminated()


def _unwind_on_sigterm():
    """Makes SIGTERM raise ``Terminated``; returns the handler it replaced (None: not main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_terminated)


# The run settings a resume takes from config.json unless their flag is given,
# and the defaults of a new run: flag -> (default, where config.json keeps it).
RUN_SETTINGS = {
    "max_actor_steps": (None, ("max_actor_steps",)),
    "target_eval_return": (None, ("schedule", "target_eval_return")),
    "eval_every_steps": (None, ("schedule", "eval_every_actor_steps")),
    "eval_period": (30.0, ("schedule", "eval_every_s")),
    "eval_episodes": (5, ("schedule", "eval_episodes")),
    "checkpoint_period": (300.0, ("schedule", "checkpoint_every_s")),
    "video_every": (0, ("schedule", "video_every_evals")),
}


def resolve_run_settings(args: argparse.Namespace) -> None:
    """Fills the run settings no flag gave: from the run's config.json on ``--resume``, else defaults.

    A resumed run keeps its budget, evaluation schedule and target, so
    ``--resume --logdir RUN`` of a run started with ``--max-actor-steps N``
    stops at N rather than training without end.
    """
    stored: Dict[str, Any] = {}
    if args.resume and args.logdir:
        stored = preflight.read_stored_config(args.logdir)
    for flag, (default, where) in RUN_SETTINGS.items():
        if getattr(args, flag, None) is not None:
            continue
        value: Any = stored
        for key in where:
            value = value.get(key) if isinstance(value, dict) else None
        if flag == "eval_every_steps" and not value:
            value = None  # 0: the run evaluated by seconds
        setattr(args, flag, default if value is None else value)


def env_kwargs_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """The ``EnvironmentFactory`` kwargs from the run flags."""
    return {"action_repeat": args.action_repeat} if args.action_repeat != 1 else {}


def experiment_from_args(args: argparse.Namespace, logdir: str, builder: Any) -> Any:
    """The ``Experiment`` the run flags describe (``rlplat train`` and ``rlplat sweep``)."""
    from rlplat.experiment import EnvironmentFactory, Experiment  # pylint: disable=g-import-not-at-top

    by_steps = args.eval_every_steps is not None
    return Experiment(builder, EnvironmentFactory(args.env, env_kwargs_from_args(args)), seed=args.seed,
                      num_actors=args.num_actors, max_actor_steps=args.max_actor_steps,
                      eval_every_actor_steps=args.eval_every_steps if by_steps else 0,
                      eval_every_s=None if by_steps else args.eval_period,
                      eval_episodes=args.eval_episodes, target_eval_return=args.target_eval_return,
                      checkpoint_every_s=args.checkpoint_period, video_every_evals=args.video_every,
                      logdir=logdir, resume=bool(args.resume))


def layout_kwargs_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """``RayLayoutConfig`` fields from the run flags (``rlplat train`` and ``rlplat sweep``)."""
    return dict(address=args.address, num_learner_replicas=args.num_learner_replicas,
                num_learner_workers=args.num_learner_workers,
                allow_unauthenticated_ray=args.allow_unauthenticated_ray,
                replay_checkpoint=bool(args.replay_checkpoint),
                debug_eager=args.debug_eager,
                envs_per_actor=args.envs_per_actor,
                num_replay_shards=args.num_replay_shards,
                weight_publish_period=args.weight_publish_period,
                weights_per_node=not args.weights_per_actor,
                weight_relay=bool(args.weight_relay),
                **common.placement_from_args(args))


def _run_on_ray(args: argparse.Namespace, prepared: PreparedRun):
    """``run_on_ray`` of a prepared run: its summary, or an exit code when it failed."""
    # Ray only now: usage errors found earlier are reported before paying for
    # it. The driver itself needs no TensorFlow (its TensorBoard writer is
    # TF-free); the workers import it in their own processes.
    from rlplat.distributed import cluster  # pylint: disable=g-import-not-at-top
    from rlplat.distributed.errors import RunFailedError, RunInterrupted  # pylint: disable=g-import-not-at-top
    from rlplat.runners import run_on_ray  # pylint: disable=g-import-not-at-top

    print(f"{'resuming' if args.resume else 'run'} in {prepared.logdir}", flush=True)
    try:
        return run_on_ray(prepared.experiment, prepared.layout)
    except (ValueError, cluster.ClusterConnectionError) as e:  # placement on this cluster, in field names
        raise common.UsageError(run_flags(str(e))) from None
    except RunFailedError as e:
        sys.stderr.write(f"rlplat: error: {e}\n")
        return common.EXIT_FAILURE
    except RunInterrupted as e:
        sys.stderr.write(f"rlplat: {e}; logs and checkpoints in {prepared.logdir}\n")
        return e.exit_code
