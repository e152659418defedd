"""``rlplat eval --logdir RUN``: watch a run's policy act greedily, optionally on video.

    rlplat eval --logdir runs/d4pg-20260101-120000 --episodes 5 --video policy.mp4

Loads the run's newest checkpoint (or ``--checkpoint N``, learner step N),
rebuilds the agent's acting network from ``config.json`` and restores only its
weights (``rlplat.evaluation``), runs ``--episodes`` greedy episodes on the
run's environment seeded with ``--seed`` (same checkpoint and seed, same
returns), prints each return and the mean, and with ``--video`` renders them
offscreen into a .gif or .mp4 (``rlplat.utils.video``).

Every flag, the run directory, its checkpoint and the video path are checked
before TensorFlow is imported; each bad input is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import math
import time

from rlplat.launch import common, saved_run

NAME = "eval"
HELP = "run a trained policy greedily for a few episodes (returns, optional .gif/.mp4 video)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    saved_run.add_flags(parser, "evaluate")
    parser.add_argument("--episodes", type=int, default=5, metavar="N",
                        help="greedy episodes to run (default: 5)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the environment (and actor): same checkpoint and seed give the "
                             "same returns (default: 0)")
    video = parser.add_argument_group("video")
    video.add_argument("--video", default=None, metavar="FILE",
                       help="record every episode, offscreen, into FILE (.gif or .mp4)")
    video.add_argument("--video-size", type=_size, default=(320, 240), metavar="WxH",
                       help="frame width x height in pixels (default: 320x240)")
    video.add_argument("--video-fps", type=float, default=30.0, metavar="FPS",
                       help="frames per second of video: every k-th control step is rendered so "
                            "playback runs at real time (default: 30; .gif at most 50)")
    video.add_argument("--camera", type=int, default=0, metavar="ID",
                       help="MuJoCo camera id (-1: the free camera; default: 0)")


def _size(text: str):
    width, sep, height = text.lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit() or int(width) < 1 or int(height) < 1:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT in pixels like 320x240, got {text!r}")
    return int(width), int(height)


MAX_EPISODES = 100_000  # ~a day of 1000-step episodes here: more is a typo, not a plan


def _check_flags(args: argparse.Namespace) -> None:
    """The flags alone (no file system beyond the video's folder)."""
    from rlplat.utils import video  # pylint: disable=g-import-not-at-top  (no TF)

    if not 1 <= args.episodes <= MAX_EPISODES:
        raise common.UsageError(f"--episodes must be in 1..{MAX_EPISODES:,} (got {args.episodes}); "
                                "evaluate in batches of at most that many")
    if not 0 <= args.seed <= common.MAX_SEED:
        raise common.UsageError(f"--seed must be in 0..{common.MAX_SEED} (got {args.seed}), the range "
                                "MuJoCo's and NumPy's seeds take")
    saved_run.check_checkpoint_flag(args)
    if not 0 < args.video_fps < math.inf:
        raise common.UsageError(f"--video-fps must be > 0 and finite (got {args.video_fps:g})")
    if args.video is not None:
        try:
            video.check_video_path(args.video)
        except ValueError as e:
            raise common.UsageError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    from rlplat import evaluation  # pylint: disable=g-import-not-at-top  (no TF)

    _check_flags(args)
    run = saved_run.open_run(args)
    record, step, prefix, builder = run.record, run.step, run.prefix, run.builder
    if args.video is not None and record.env.startswith("gym:"):
        raise common.UsageError(f"--video: {record.env} has no MuJoCo scene to render (gym: tasks "
                                "cannot be recorded); drop --video")

    from rlplat.utils import tf_setup  # pylint: disable=g-import-not-at-top

    tf_setup.import_tensorflow()  # every input checked: now pay for TensorFlow
    import rlplat_envs as envs  # pylint: disable=g-import-not-at-top  (dm_control; sets MUJOCO_GL first)
    from rlplat import specs  # pylint: disable=g-import-not-at-top

    environment = envs.make_environment(record.env, seed=args.seed, **dict(record.env_kwargs))
    try:
        if args.video is not None:
            _check_scene(environment, args)
        print(f"{record.builder} on {record.env}, checkpoint ckpt-{step} (learner step {step}), "
              f"seed {args.seed}", flush=True)
        try:
            source = evaluation.restore_policy(builder, specs.make_environment_spec(environment),
                                               prefix, step)
        except evaluation.RunError as e:
            raise common.UsageError(str(e)) from None
        if args.video is None:
            returns = _episodes(evaluation, builder, environment, source, args)
        else:
            returns = _episodes_on_video(evaluation, builder, environment, source, args,
                                         int(record.env_kwargs.get("action_repeat", 1)))
    finally:
        environment.close()
    mean = sum(returns) / len(returns)
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / len(returns))
    print(f"mean return {mean:.3f} over {len(returns)} episode(s) (std {std:.3f})", flush=True)
    return common.EXIT_OK


def _episodes(evaluation, builder, environment, source, args) -> list:
    returns = []
    start = time.perf_counter()
    for i, stats in enumerate(evaluation.run_episodes(builder, environment, source, args.episodes,
                                                      args.seed), start=1):
        returns.append(float(stats["episode_return"]))
        print(f"episode {i}: return {returns[-1]:.3f} ({stats['episode_length']} steps, "
              f"{time.perf_counter() - start:.1f} s)", flush=True)
    return returns


def _check_scene(environment, args) -> None:
    """``--video`` needs MuJoCo physics to render, and ``--camera`` one of its cameras."""
    from rlplat.utils import video  # pylint: disable=g-import-not-at-top

    if not video.can_render(environment):
        raise common.UsageError(f"--video: {args.logdir}'s environment has no MuJoCo scene to "
                                "render; drop --video")
    ncam = int(environment.physics.model.ncam)
    if not -1 <= args.camera < ncam:
        raise common.UsageError(f"--camera {args.camera}: this task has cameras 0..{ncam - 1} "
                                "(and -1, the free camera)")
    width, height = args.video_size
    scene = environment.physics.model.vis.global_
    max_width, max_height = int(scene.offwidth), int(scene.offheight)
    if width > max_width or height > max_height:
        raise common.UsageError(f"--video-size {width}x{height} is larger than this task's offscreen "
                                f"framebuffer ({max_width}x{max_height}); pass --video-size "
                                f"{min(width, max_width)}x{min(height, max_height)} or smaller")


def _episodes_on_video(evaluation, builder, environment, source, args, action_repeat: int) -> list:
    from rlplat.utils import video  # pylint: disable=g-import-not-at-top

    # Agent steps per second of simulated time: real-time playback.
    control_fps = 1.0 / (float(environment.control_timestep()) * action_repeat)
    fps = args.video_fps
    if args.video.lower().endswith(".gif"):
        fps = min(fps, video.GIF_MAX_FPS)  # else a faster GIF would play in slow motion
    stride = video.frame_stride(control_fps, fps)
    width, height = args.video_size
    writer = video.VideoWriter(args.video, control_fps / stride)
    with writer:
        recorder = video.FrameRecorder(environment, writer.append, height, width, every=stride,
                                       camera_id=args.camera)
        returns = _episodes(evaluation, builder, recorder, source, args)
    print(f"video: {args.video} ({writer.num_frames} frames, {width}x{height}, "
          f"{writer.fps:.3g} fps)", flush=True)
    return returns
