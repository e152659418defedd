"""The evaluator: the greedy policy for whole episodes, with video when asked."""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List

import numpy as np

from rlplat.distributed import process
from rlplat.distributed.variables import RemoteVariableSource
from rlplat.distributed.workers import common


class Evaluator:
    """Runs the greedy policy (no exploration, no replay) for whole episodes.

    Args:
      builder, environment: as for ``ActorWorker``.
      seed: the evaluator's seed (``seeding.role_seed(seed, "evaluator")``).
      variable_source: the learner's Ray actor name (or handle).
      weights_timeout_s, startup_timeout_s: as for ``ActorWorker``.
    """

    # Video of an evaluation episode (``evaluate(video=True)``): an MP4 for
    # the logdir and a smaller GIF that TensorBoard plays in its Images tab.
    VIDEO_SIZE = (240, 320)
    VIDEO_FPS = 30.0
    TENSORBOARD_GIF_SHRINK = 2

    def __init__(self, builder, environment, seed: int,
                 variable_source, weights_timeout_s: float = 60.0, startup_timeout_s: float = 300.0,
                 video: bool = False):
        self.init_entered = time.time()  # wall clock, in the placement record (``placement._where_am_i``)
        process.setup_light_worker()  # TensorFlow only if the actor needs it (below)
        from rlplat import specs  # pylint: disable=g-import-not-at-top

        self._environment = common.make_environment(environment, int(seed))
        self._frames: List[np.ndarray] = []
        self._recorder = None
        if video:
            from rlplat.utils import video as video_lib  # pylint: disable=g-import-not-at-top

            repeat = int(dict(getattr(environment, "kwargs", None) or {}).get("action_repeat", 1))
            self._control_fps = 1.0 / (float(self._environment.control_timestep()) * repeat)
            self._stride = video_lib.frame_stride(self._control_fps, self.VIDEO_FPS)
            self._recorder = video_lib.FrameRecorder(self._environment, self._frames.append,
                                                     *self.VIDEO_SIZE, every=self._stride)
            self._recorder.recording = False
            self._environment = self._recorder
        spec = specs.make_environment_spec(self._environment)
        self._source = RemoteVariableSource(variable_source, timeout_s=weights_timeout_s,
                                            first_timeout_s=startup_timeout_s)
        # The learner builds the greedy actor, so this process needs no
        # TensorFlow (one import fewer per run, and less memory); an actor
        # that cannot be rebound is built here instead.
        actor = self._source.make_unbound_actor(0, int(seed), evaluation=True)
        if actor is not None:
            actor.bind_source(self._source)
        else:
            process.setup_worker(1, 1, hide_gpus=True)
            actor = builder.make_actor(spec, self._source, None, 0, int(seed), evaluation=True)
        self._actor = actor
        self._loop = common.make_loop(self._environment, self._actor)

    def evaluate(self, num_episodes: int, video: bool = False) -> Dict[str, Any]:
        """Pulls the newest weights, runs ``num_episodes``; returns mean return and version.

        With ``video`` (and an evaluator built with ``video=True``) the first
        episode is rendered, and ``"video"`` holds ``{"mp4": bytes, "gif":
        bytes, "frames", "height", "width", "fps"}``: bytes, because on a
        cluster this process may not see the driver's logdir.
        """
        self._actor.update(wait=True)
        version = int(self._actor.policy_version)
        start = time.perf_counter()
        returns, steps = [], 0
        record = bool(video) and self._recorder is not None
        for i in range(int(num_episodes)):
            if record:
                self._recorder.recording = i == 0
            stats = common.to_python(dict(self._loop.run_episode() or {}))
            returns.append(float(stats.get("episode_return", math.nan)))
            steps += int(stats.get("episode_length", stats.get("steps", 0)) or 0)
        out = {"eval_return": float(np.mean(returns)), "eval_return_std": float(np.std(returns)),
               "eval_episodes": len(returns), "eval_steps": steps, "policy_version": version,
               "eval_seconds": time.perf_counter() - start}
        if record:
            self._recorder.recording = False
            out["video"] = self._encode_video()
        return out

    def _encode_video(self) -> Dict[str, Any]:
        from rlplat.utils import video as video_lib  # pylint: disable=g-import-not-at-top

        frames, self._frames[:] = list(self._frames), []
        fps = self._control_fps / self._stride
        k = self.TENSORBOARD_GIF_SHRINK
        return {"mp4": video_lib.encode(frames, ".mp4", fps),
                "gif": video_lib.encode([f[::k, ::k] for f in frames], ".gif", fps),
                "frames": len(frames), "height": self.VIDEO_SIZE[0], "width": self.VIDEO_SIZE[1],
                "fps": fps}
