"""Offscreen frames of a MuJoCo environment, written as a GIF or an MP4.

Frames come from a dm_control ``Camera`` on the environment's physics, the
one ``physics.render(height, width, camera_id)`` would make, kept for the
recorder's frames rather than made again for each. It renders offscreen
through whatever ``MUJOCO_GL`` selects (``envs`` sets ``osmesa``, software
rendering that needs no display or GPU), with a shadow map no finer than the
frames can show (``shadow_map_size``). Environments without MuJoCo physics
(``gym:`` tasks) cannot be rendered: ``can_render`` says so before any
episode runs.

Writers, chosen by the file's extension (``VIDEO_EXTENSIONS``):

* ``.gif``: Pillow (already installed, as a matplotlib dependency). GIF
  delays are whole centiseconds and most viewers treat delays under 2 cs as
  10 cs, so the frame rate is capped at 50 fps.
* ``.mp4``: ``imageio`` with the ``imageio-ffmpeg`` plugin, pinned in
  pyproject.toml. Its wheel ships a static ffmpeg binary, so ``pip install``
  is the whole set-up on every platform (no apt package, no download at run
  time), and the H.264 files it writes play in browsers and players.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import dm_env
import numpy as np

from rlplat_envs.base import EnvironmentWrapper

VIDEO_EXTENSIONS = (".gif", ".mp4")
GIF_MAX_FPS = 50.0


def check_video_path(path: str) -> str:
    """The lower-case extension of ``path`` after checking it can be written.

    Raises:
      ValueError: one line naming the fix (an unknown extension, or a folder
        that does not exist or is not a directory).
    """
    extension = os.path.splitext(path)[1].lower()
    if extension not in VIDEO_EXTENSIONS:
        raise ValueError(f"--video {path}: unknown extension {extension or '(none)'!r}; "
                         f"name the file .gif or .mp4, e.g. --video policy.mp4")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--video {path}: folder {folder} does not exist; create it first "
                         "or write the video elsewhere")
    if os.path.isdir(path):
        raise ValueError(f"--video {path} is a directory; name a file such as {path.rstrip('/')}.mp4")
    return extension


def can_render(environment: dm_env.Environment) -> bool:
    """True when ``environment`` (through its wrappers) has dm_control physics to render."""
    physics = getattr(environment, "physics", None)
    return callable(getattr(physics, "render", None))


def render(environment: dm_env.Environment, height: int, width: int, camera_id: int = 0) -> np.ndarray:
    """One RGB frame, uint8 ``[height, width, 3]``, of the environment's current state."""
    return np.asarray(environment.physics.render(height=height, width=width, camera_id=camera_id),
                      dtype=np.uint8)


def shadow_map_size(height: int, width: int, model_size: int) -> int:
    """The shadow map's side for ``height`` x ``width`` frames: ``model_size``, or less where that is finer
    than the frame can show.

    The map spans about what the camera sees, so a side of twice the frame's
    longer side gives each frame pixel more than one shadow texel; rounded up
    to a power of two, at least 256, never above the model's own.

    Why: MuJoCo renders the shadow map at the model's ``shadowsize`` (2048
    in the control suite) for every frame, whatever the frame's size. In
    software rendering (``MUJOCO_GL=osmesa``) that was most of a small
    frame's cost (``docs/measurements.md``).
    """
    needed = 1 << max(8, int(np.ceil(np.log2(2 * max(int(height), int(width), 1)))))
    return int(min(int(model_size), needed)) if model_size > 0 else needed


class FrameRecorder(EnvironmentWrapper):
    """Renders a frame after ``reset`` and after every ``every``-th ``step`` into ``sink``.

    Wrap the outermost environment (after action repeat), so ``every``
    counts agent steps. ``sink`` takes each frame as it is made (a
    ``VideoWriter.append``, or ``list.append``), so a long evaluation never
    holds all its frames; ``recording = False`` pauses rendering, which is
    by far the slowest part of an evaluated step.
    """

    def __init__(self, environment: dm_env.Environment, sink: Callable[[np.ndarray], None],
                 height: int, width: int, *, every: int = 1, camera_id: int = 0):
        super().__init__(environment)
        if not can_render(environment):
            raise ValueError("this environment has no MuJoCo physics to render (gym: tasks "
                             "cannot be recorded); drop --video or pick a control-suite task")
        if min(height, width) < 1 or every < 1:
            raise ValueError(f"height, width and every must be >= 1 (got {height}, {width}, {every})")
        self.height, self.width, self.every, self.camera_id = height, width, every, camera_id
        self.recording = True
        self.num_frames = 0
        self._sink = sink
        self._steps = 0
        # One camera (and its MuJoCo scene) for every frame of this physics, where
        # ``physics.render`` makes and frees one per frame.
        self._camera = None
        self._camera_physics = None
        _shrink_shadow_map(environment.physics, height, width)

    def _frame(self) -> np.ndarray:
        physics = self._environment.physics
        if self._camera_physics is not physics:
            self._camera, self._camera_physics = _camera(physics, self.height, self.width, self.camera_id), physics
        if self._camera is None:
            return render(self._environment, self.height, self.width, self.camera_id)
        # A copy: the camera returns a view of its own pixel buffer, which its next frame overwrites.
        return np.array(self._camera.render(), dtype=np.uint8, copy=True)

    def _capture(self) -> None:
        if self.recording:
            self._sink(self._frame())
            self.num_frames += 1

    def reset(self) -> dm_env.TimeStep:
        timestep = self._environment.reset()
        self._steps = 0
        self._capture()
        return timestep

    def step(self, action) -> dm_env.TimeStep:
        timestep = self._environment.step(action)
        self._steps += 1
        # The last step of an episode is always kept, so every episode ends on its final state.
        if self._steps % self.every == 0 or timestep.last():
            self._capture()
        return timestep


def _camera(physics, height: int, width: int, camera_id: int):
    """dm_control's ``Camera`` on ``physics``, which ``render()`` brings up to date each call; None where
    the physics is not dm_control's (its own ``render`` is used then)."""
    try:
        from dm_control.mujoco import engine  # pylint: disable=g-import-not-at-top
    except ImportError:
        return None
    if not isinstance(physics, engine.Physics):
        return None
    return engine.Camera(physics, height=height, width=width, camera_id=camera_id)


def _shrink_shadow_map(physics, height: int, width: int) -> None:
    """Sizes the shadow map for these frames (``shadow_map_size``) while the physics has not rendered yet.

    MuJoCo reads ``shadowsize`` once, when the rendering context is made (on
    the first render); a physics that already rendered is left as it is.
    """
    quality = getattr(getattr(getattr(physics, "model", None), "vis", None), "quality", None)
    if quality is None or getattr(physics, "_contexts", True) is not None:
        return
    quality.shadowsize = shadow_map_size(height, width, int(quality.shadowsize))


def frame_stride(control_fps: float, video_fps: float) -> int:
    """Keep every k-th agent step so ``control_fps / k`` is at most ``video_fps`` (and close to it)."""
    return max(1, int(np.ceil(control_fps / video_fps - 1e-9)))


class VideoWriter:
    """Appends RGB uint8 frames to ``path`` (.gif or .mp4, by extension) at ``fps``.

    MP4 frames stream to ffmpeg as they come. GIF frames are reduced to a
    256-colour palette at once (a third of the memory of RGB) and written on
    ``close``, as Pillow writes a GIF in one call. Use as a context manager,
    or call ``close``; nothing is written before the first frame.
    """

    def __init__(self, path: str, fps: float):
        self.extension = check_video_path(path)
        if not fps > 0:
            raise ValueError(f"fps must be > 0 (got {fps})")
        self.path = path
        self.fps = min(float(fps), GIF_MAX_FPS) if self.extension == ".gif" else float(fps)
        self.num_frames = 0
        self._images: list = []  # GIF: palette images until close
        self._writer = None  # MP4: imageio's ffmpeg writer, opened at the first frame

    def append(self, frame: np.ndarray) -> None:
        """Adds one ``[height, width, 3]`` uint8 frame."""
        frame = np.asarray(frame, np.uint8)
        if self.extension == ".gif":
            from PIL import Image  # pylint: disable=g-import-not-at-top

            # An adaptive palette per frame: what Pillow would do on save anyway.
            self._images.append(Image.fromarray(frame).convert("P", palette=Image.Palette.ADAPTIVE))
        else:
            if self._writer is None:
                self._writer = _open_mp4(self.path, self.fps)
            self._writer.append_data(frame)
        self.num_frames += 1

    def close(self) -> int:
        """Finishes the file; returns the number of frames appended."""
        if self._images:
            images, self._images = self._images, []
            # Pillow merges an identical consecutive frame into the previous
            # one's duration: timing is kept even where the count read back drops.
            images[0].save(self.path, save_all=True, append_images=images[1:], loop=0,
                           duration=max(20, int(round(1000.0 / self.fps))))
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
        return self.num_frames

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_video(path: str, frames: Sequence[np.ndarray], fps: float) -> int:
    """Writes ``frames`` to ``path`` (see ``VideoWriter``); returns the frame count."""
    if not len(frames):
        raise ValueError("no frames to write")
    with VideoWriter(path, fps) as writer:
        for frame in frames:
            writer.append(frame)
    return writer.num_frames


def encode(frames: Sequence[np.ndarray], extension: str, fps: float) -> bytes:
    """``frames`` as the bytes of a .gif or .mp4 file (through a temporary file)."""
    import tempfile  # pylint: disable=g-import-not-at-top

    with tempfile.TemporaryDirectory(prefix="rlplat-video-") as folder:
        path = os.path.join(folder, "video" + extension)
        write_video(path, frames, fps)
        with open(path, "rb") as f:
            return f.read()


def _open_mp4(path: str, fps: float):
    import imageio.v2 as imageio  # pylint: disable=g-import-not-at-top

    # H.264 in yuv420p (what browsers play) needs even sides; macro_block_size=2
    # pads odd ones by at most one pixel instead of imageio's default 16.
    return imageio.get_writer(path, format="FFMPEG", mode="I", fps=fps, codec="libx264",
                              pixelformat="yuv420p", macro_block_size=2, ffmpeg_log_level="error")
