"""Milliseconds per recorded step of an evaluation on video: ``video.FrameRecorder`` against dm_control's own render.

An evaluation on video (``rlplat eval --video``, a run's ``--video-every-evals``)
renders a frame every few agent steps in software (``MUJOCO_GL=osmesa``).
This steps each task with a fixed action and records every step, in two
ways, alternating A B B A per round in fresh environments of the same seed:

- ``physics_render``: ``physics.render(height, width, camera_id)`` per frame,
  which makes and frees a camera and its MuJoCo scene for each frame and
  renders the shadow map at the model's ``shadowsize`` (2048 in the suite);
- ``recorder``: ``video.FrameRecorder`` as the evaluations use it: one camera
  for all frames, the shadow map sized to the frame (``shadow_map_size``).

It reports the median ms per recorded step (the physics step included) and
how far the two ways' frames of the same states differ: the mean absolute
difference and the share of pixels off by more than 8 levels (shadow edges).

    python bench/video_render.py              # cartpole, walker, cheetah at 64x48 and 320x240
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np  # noqa: E402  pylint: disable=wrong-import-position

import seeds  # noqa: E402  pylint: disable=wrong-import-position

WAYS = ("physics_render", "recorder")


def _episode(task: str, height: int, width: int, way: str, steps: int, seed: int):
    """(frames, seconds per recorded step) for ``steps`` steps of ``task`` recorded the given way."""
    from rlplat.utils import video  # pylint: disable=g-import-not-at-top
    from rlplat_envs import make_environment  # pylint: disable=g-import-not-at-top

    environment = make_environment(task, seed=seed)
    try:
        frames: List[np.ndarray] = []
        if way == "recorder":
            recorder = video.FrameRecorder(environment, frames.append, height, width)
            reset, step = recorder.reset, recorder.step
        else:
            def reset():
                timestep = environment.reset()
                frames.append(video.render(environment, height, width))
                return timestep

            def step(action):
                timestep = environment.step(action)
                frames.append(video.render(environment, height, width))
                return timestep
        reset()
        action = np.full(environment.action_spec().shape, 0.3, np.float32)
        start = time.perf_counter()
        for _ in range(steps):
            step(action)
        return frames, (time.perf_counter() - start) / steps
    finally:
        environment.close()


def measure(task: str, height: int, width: int, rounds: int, steps: int, seed: int) -> Dict[str, Any]:
    per_round: Dict[str, List[float]] = {way: [] for way in WAYS}
    mean_diff, off_share = [], []
    for r in range(rounds):
        order = WAYS if r % 2 == 0 else WAYS[::-1]
        frames = {}
        for way in order:
            frames[way], seconds = _episode(task, height, width, way, steps, seed)
            per_round[way].append(1000.0 * seconds)
        for a, b in zip(frames["physics_render"], frames["recorder"]):
            off = np.abs(a.astype(int) - b.astype(int)).max(axis=-1)
            mean_diff.append(float(off.mean()))
            off_share.append(float((off > 8).mean()))
    median = {way: statistics.median(v) for way, v in per_round.items()}
    return {"task": task, "height": height, "width": width, "ms_per_step": median, "per_round": per_round,
            "speedup": median["physics_render"] / median["recorder"],
            "frame_mean_abs_diff": float(np.mean(mean_diff)), "frame_share_off_by_8": float(np.mean(off_share))}


def _sizes(text: str) -> List[tuple]:
    """``"48x64,240x320"`` -> ``[(48, 64), (240, 320)]``; argparse's one-line error otherwise."""
    try:
        sizes = [tuple(int(v) for v in size.split("x")) for size in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(len(s) != 2 or min(s) < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: give HEIGHTxWIDTH pairs, comma-separated, e.g. 48x64,240x320")
    return sizes


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 (got {value})")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="cartpole:swingup,walker:walk,cheetah:run")
    parser.add_argument("--sizes", type=_sizes, default="48x64,240x320", help="HEIGHTxWIDTH, comma-separated")
    parser.add_argument("--rounds", type=_positive, default=4)
    parser.add_argument("--steps", type=_positive, default=60, help="recorded steps per episode")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    from rlplat_envs import make_environment  # pylint: disable=g-import-not-at-top

    tasks = args.tasks.split(",")
    for task in tasks:  # every name checked before anything is measured
        try:
            make_environment(task, seed=args.seed).close()
        except ValueError as e:
            parser.error(f"--tasks: {e}")

    cases = []
    for task in tasks:
        for height, width in args.sizes:
            case = measure(task, height, width, args.rounds, args.steps, args.seed)
            cases.append(case)
            print(f"{task} {height}x{width}: physics.render {case['ms_per_step']['physics_render']:.1f} ms/step, "
                  f"recorder {case['ms_per_step']['recorder']:.1f} ms/step ({case['speedup']:.2f}x); frames "
                  f"differ by {case['frame_mean_abs_diff']:.3f} on average, "
                  f"{100 * case['frame_share_off_by_8']:.2f}% of pixels by more than 8", flush=True)
    report = {"benchmark": "video_render", "command": "python bench/video_render.py " + " ".join(sys.argv[1:]),
              "machine": seeds.machine(), "mujoco_gl": os.environ.get("MUJOCO_GL"),
              "rounds": args.rounds, "steps": args.steps, "cases": cases,
              "median_speedup": statistics.median(c["speedup"] for c in cases),
              "load_average": os.getloadavg()}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "video_render.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    _plot(report, os.path.join(args.out, "video_render.png"))


def _plot(report: Dict[str, Any], path: str) -> None:
    import matplotlib  # pylint: disable=g-import-not-at-top

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    cases = report["cases"]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, case in enumerate(cases):
        for j, way in enumerate(WAYS):
            x = i + (j - 0.5) * 0.36
            ax.bar(x, case["ms_per_step"][way], width=0.34, color=("tab:gray", "tab:blue")[j], alpha=0.75,
                   label=way if i == 0 else None)
            ax.plot([x] * len(case["per_round"][way]), case["per_round"][way], "k.", ms=3)
    ax.set_xticks(range(len(cases)), [f"{c['task']}\n{c['height']}x{c['width']}" for c in cases], fontsize=8)
    ax.set_ylabel("ms per recorded step")
    ax.set_title(f"Evaluation on video, {report['mujoco_gl']} ({report['machine'].get('cpu_model', '?')}; "
                 "dots: rounds, bars: median)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
