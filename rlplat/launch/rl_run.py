"""Flags, checks and the run loop shared by the actor-learner trainers (D4PG, IMPALA).

Every RL agent takes the same run flags (where to run, how long, logs,
placement); only its config flags and its builder differ. A trainer module
calls ``add_run_flags`` plus ``common.add_config_flags`` in ``add_arguments``
and, in ``run``: ``check_run_args`` (flags and ``--logdir``), its config,
``check_config`` (batch split, ``--resume`` against the run's config.json),
``check_env`` (name, and the agent's action kind), then ``run_agent``.

Every bad input is refused by these checks with one line and exit code 2
before Ray starts and before the run directory is created: cheap checks
first, the environment (dm_control, ~2 s) last.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

from rlplat import config_fields as fields
from rlplat import replay_shards
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


def check_run_args(args: argparse.Namespace, agent: str) -> str:
    """Checks every run flag and ``--logdir`` before Ray or TF start; returns the logdir.

    Reads the file system only (no environment, no TensorFlow): see
    ``check_config`` and ``check_env`` for the rest.

    Raises:
      common.UsageError: one line naming the flag to fix.
    """
    resolve_run_settings(args)
    for flag in ("num_actors", "num_learner_workers", "action_repeat", "eval_episodes"):
        if getattr(args, flag) < 1:
            raise common.UsageError(f"--{flag.replace('_', '-')} must be >= 1 "
                                    f"(got {getattr(args, flag)})")
    if args.num_learner_replicas is not None and args.num_learner_replicas < 1:
        raise common.UsageError(f"--num-learner-replicas must be >= 1 (got {args.num_learner_replicas})")
    if args.num_learner_workers > 1 and args.num_learner_replicas not in (None, 1):
        raise common.UsageError(
            f"--num-learner-replicas {args.num_learner_replicas} cannot be combined with "
            f"--num-learner-workers {args.num_learner_workers}: each learner worker uses all of its "
            "node's GPUs (or its CPU); drop --num-learner-replicas")
    if args.debug_eager and (args.num_learner_workers > 1 or (args.num_learner_replicas or 1) > 1):
        raise common.UsageError("--debug-eager runs the learner on one device: drop "
                                "--num-learner-replicas and --num-learner-workers")
    if args.envs_per_actor < 1:
        raise common.UsageError(f"--envs-per-actor must be >= 1 (got {args.envs_per_actor}); 1 steps one "
                                "environment per actor")
    try:
        replay_shards.check_shards(args.num_actors, args.num_replay_shards)
    except ValueError as e:
        raise common.UsageError(str(e)) from None
    if args.num_replay_shards > 1 and args.replay_checkpoint:
        raise common.UsageError(f"--replay-checkpoint works with one replay server; drop it or "
                                f"--num-replay-shards {args.num_replay_shards}")
    if args.video_every < 0:
        raise common.UsageError(f"--video-every must be >= 0 (got {args.video_every}); 0 records no video")
    if args.video_every and args.env.startswith("gym:"):
        raise common.UsageError(f"--video-every: {args.env} has no MuJoCo scene to render (gym: tasks "
                                "cannot be recorded); drop --video-every or pick a control-suite task")
    if args.max_actor_steps is not None and args.max_actor_steps < 1:
        raise common.UsageError(f"--max-actor-steps must be >= 1 (got {args.max_actor_steps}); "
                                "leave it out to run until interrupted")
    if not 0 <= args.seed <= common.MAX_SEED:
        raise common.UsageError(f"--seed must be in 0..{common.MAX_SEED} (got {args.seed}), the range "
                                "MuJoCo's and NumPy's seeds take")
    if args.max_actor_steps is not None and args.max_actor_steps > fields.INT64_MAX:
        raise common.UsageError(f"--max-actor-steps must fit in 64 bits (got {args.max_actor_steps}); "
                                "leave it out to run until interrupted")
    for flag in ("eval_period", "checkpoint_period"):
        value = getattr(args, flag)
        if not 0 < value <= fields.FLOAT32_MAX:
            raise common.UsageError(f"--{flag.replace('_', '-')} must be a number of seconds > 0 "
                                    f"(got {value:g})")
    if args.eval_every_steps is not None and args.eval_every_steps < 1:
        raise common.UsageError(f"--eval-every-steps must be >= 1 (got {args.eval_every_steps}); "
                                "leave it out to evaluate every --eval-period seconds")
    if args.target_eval_return is not None and not abs(args.target_eval_return) <= fields.FLOAT32_MAX:
        raise common.UsageError(f"--target-eval-return must be a finite number "
                                f"(got {args.target_eval_return:g}); leave it out to never stop early")
    if args.address not in (None, "auto") and not common.looks_like_host_port(args.address):
        raise common.UsageError(f"--address must be 'auto' or HOST:PORT (got {args.address!r}); "
                                "e.g. --address 127.0.0.1:6379")
    if args.allow_unauthenticated_ray and args.address is None:
        raise common.UsageError("--allow-unauthenticated-ray only applies with --address (a local "
                                "run always uses token authentication); drop it")
    allocator_problem = process.allocator_setting_problem()
    if allocator_problem:
        raise common.UsageError(allocator_problem)
    common.placement_from_args(args)
    logdir = common.check_run_flags(
        argparse.Namespace(num_replicas=args.num_learner_replicas, resume=args.resume,
                           logdir=args.logdir), agent)
    preflight.check_logdir(logdir, args.resume)
    if args.replay_checkpoint is None:  # a resumed run keeps what config.json recorded
        args.replay_checkpoint = args.resume and preflight.stored_replay_checkpoint(logdir)
    return logdir


def check_config(args: argparse.Namespace, logdir: str, agent: str, config: Any,
                 shape_fields: Sequence[str], replay_fields: Sequence[str] = ()) -> None:
    """The agent config against the run flags: the batch split, and ``--resume`` against the run.

    Raises:
      common.UsageError: the global batch does not split over the learner
        replicas or workers, or ``--resume`` changes the agent, ``--env`` or
        a network-shape flag (``shape_fields``) of the run in ``logdir``, or,
        restoring a replay checkpoint, a flag its tables were built from
        (``replay_fields``).
    """
    batch = config.global_batch_size
    for flag, count in (("--num-learner-replicas", args.num_learner_replicas),
                        ("--num-learner-workers", args.num_learner_workers)):
        if count and batch % count:
            raise common.UsageError(
                f"--global-batch-size {batch} does not split over {flag} {count}; use a multiple "
                f"of {count} such as {max(count, batch - batch % count)}")
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


def run_agent(args: argparse.Namespace, logdir: str, make_builder: Callable[[], Any],
              layout_overrides: Optional[Dict[str, Any]] = None) -> int:
    """Runs ``make_builder()`` under ``run_on_ray`` with the run flags; returns the exit code.

    Exit codes: 0 done, 1 run failed, 2 usage (raised as UsageError), 130/143
    interrupted by SIGINT/SIGTERM (logs and checkpoints kept). While the
    driver runs it owns both signals (final checkpoint, see ``driver.Driver``);
    before and after it, SIGTERM unwinds like Ctrl-C (``Terminated``) so the
    exit code is 143 and an empty run directory is removed.
    """
    # Created only now that every check passed (and before TF and Ray load);
    # removed again if the run stops before writing anything into it.
    created = [] if args.resume else preflight.make_logdir(logdir)
    saved = _unwind_on_sigterm()
    try:
        summary = _run_on_ray(args, logdir, make_builder, layout_overrides)
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
                **common.placement_from_args(args))


def _run_on_ray(args: argparse.Namespace, logdir: str, make_builder: Callable[[], Any],
                layout_overrides: Optional[Dict[str, Any]]):
    """``run_on_ray`` with the run flags: its summary, or an exit code when it failed."""
    # Ray only now: usage errors found earlier are reported before paying for
    # it. The driver itself needs no TensorFlow (its TensorBoard writer is
    # TF-free); the workers import it in their own processes.
    from rlplat.distributed import cluster  # pylint: disable=g-import-not-at-top
    from rlplat.distributed.errors import RunFailedError, RunInterrupted  # pylint: disable=g-import-not-at-top
    from rlplat.runners import RayLayoutConfig, run_on_ray  # pylint: disable=g-import-not-at-top

    try:
        layout = RayLayoutConfig(**layout_kwargs_from_args(args), **dict(layout_overrides or {}))
        experiment = experiment_from_args(args, logdir, make_builder())
    except ValueError as e:
        raise common.UsageError(str(e)) from None
    print(f"{'resuming' if args.resume else 'run'} in {logdir}", flush=True)
    try:
        return run_on_ray(experiment, layout)
    except (ValueError, cluster.ClusterConnectionError) as e:
        raise common.UsageError(str(e)) from None
    except RunFailedError as e:
        sys.stderr.write(f"rlplat: error: {e}\n")
        return common.EXIT_FAILURE
    except RunInterrupted as e:
        sys.stderr.write(f"rlplat: {e}; logs and checkpoints in {logdir}\n")
        return e.exit_code
