"""Offscreen rendering of a real control-suite task, and the GIF / MP4 files written from it."""

import numpy as np
import pytest
from PIL import Image

import rlplat_envs as envs
from rlplat.utils import video

WIDTH, HEIGHT = 64, 48


@pytest.fixture(scope="module")
def frames():
    """Frames of cartpole:swingup rendered offscreen while a constant push moves the cart."""
    environment = envs.make_environment("cartpole:swingup", seed=0)
    out = []
    try:
        recorder = video.FrameRecorder(environment, out.append, HEIGHT, WIDTH, every=5)
        recorder.reset()
        for _ in range(30):
            recorder.step(np.ones(1, np.float32))
    finally:
        environment.close()
    return out


def test_frames_are_rgb_of_the_requested_size_not_blank_and_moving(frames):
    assert len(frames) == 1 + 30 // 5  # reset, then every 5th step
    for frame in frames:
        assert frame.shape == (HEIGHT, WIDTH, 3) and frame.dtype == np.uint8
        assert frame.var() > 0, "a blank frame"
    moved = [np.abs(a.astype(int) - b.astype(int)).sum() for a, b in zip(frames, frames[1:])]
    assert all(m > 0 for m in moved), moved


def test_gif_reads_back_with_every_frame_at_its_size(frames, tmp_path):
    path = str(tmp_path / "policy.gif")
    assert video.write_video(path, frames, fps=25) == len(frames)
    with Image.open(path) as gif:
        assert gif.n_frames == len(frames)
        assert gif.size == (WIDTH, HEIGHT)
        assert gif.info["duration"] == 40  # 25 fps


def test_mp4_reads_back_with_every_frame_at_its_size(frames, tmp_path):
    import imageio.v3 as iio

    path = str(tmp_path / "policy.mp4")
    assert video.write_video(path, frames, fps=25) == len(frames)
    decoded = iio.imread(path)
    assert decoded.shape == (len(frames), HEIGHT, WIDTH, 3)
    # Lossy H.264: close to what was rendered, not equal.
    assert np.abs(decoded.astype(float) - np.stack(frames).astype(float)).mean() < 12


def test_gym_tasks_cannot_be_recorded():
    environment = envs.make_environment("gym:CartPole-v1", seed=0)
    try:
        assert not video.can_render(environment)
        with pytest.raises(ValueError, match="no MuJoCo physics"):
            video.FrameRecorder(environment, [].append, HEIGHT, WIDTH)
    finally:
        environment.close()


@pytest.mark.parametrize("path, fragment", [
    ("{tmp}/policy.avi", "unknown extension"),
    ("{tmp}/policy", "unknown extension"),
    ("{tmp}/missing/policy.gif", "does not exist"),
])
def test_bad_video_paths_are_refused(tmp_path, path, fragment):
    with pytest.raises(ValueError, match=fragment):
        video.check_video_path(path.format(tmp=tmp_path))


def test_frame_stride_never_exceeds_the_asked_rate():
    assert video.frame_stride(100.0, 30.0) == 4  # 25 fps
    assert video.frame_stride(100.0, 50.0) == 2
    assert video.frame_stride(20.0, 30.0) == 1
