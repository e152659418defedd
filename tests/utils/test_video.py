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


def test_recorded_frames_are_what_physics_render_draws_of_the_same_states():
    """The recorder's own camera and smaller shadow map draw what ``physics.render`` draws (walker: a
    camera that tracks the body, and shadows on the floor); only shadow edges may differ."""
    def episode(record):
        environment = envs.make_environment("walker:walk", seed=3)
        try:
            out = []
            recorder = video.FrameRecorder(environment, out.append, HEIGHT, WIDTH)
            if not record:  # dm_control's own path: a new camera and scene per frame, the model's shadow map
                recorder._frame = lambda: video.render(environment, HEIGHT, WIDTH)  # pylint: disable=protected-access
                environment.physics.model.vis.quality.shadowsize = 2048
            recorder.reset()
            for _ in range(20):
                recorder.step(np.full(environment.action_spec().shape, 0.3, np.float32))
            return out
        finally:
            environment.close()

    recorded, plain = episode(True), episode(False)
    assert len(recorded) == len(plain) == 21
    for a, b in zip(recorded, plain):
        off = np.abs(a.astype(int) - b.astype(int)).max(axis=-1)
        assert off.mean() < 1.0 and (off > 8).mean() < 0.01, (off.mean(), (off > 8).mean())
    assert np.abs(recorded[0].astype(int) - recorded[-1].astype(int)).mean() > 5  # the walker moved


@pytest.mark.parametrize("height, width, model_size, expected", [
    (48, 64, 2048, 256),     # 2 x 64 = 128, raised to the floor of 256
    (240, 320, 2048, 1024),  # 2 x 320 = 640 -> 1024
    (480, 640, 2048, 2048),  # 1280 -> 2048, the model's own
    (1080, 1920, 2048, 2048),  # never above the model's own
    (48, 64, 128, 128),
])
def test_shadow_map_size_by_hand(height, width, model_size, expected):
    assert video.shadow_map_size(height, width, model_size) == expected


def test_the_recorder_sizes_the_shadow_map_only_before_the_first_render():
    fresh = envs.make_environment("cartpole:swingup", seed=0)
    rendered = envs.make_environment("cartpole:swingup", seed=0)
    try:
        assert fresh.physics.model.vis.quality.shadowsize == 2048
        video.FrameRecorder(fresh, [].append, HEIGHT, WIDTH)
        assert fresh.physics.model.vis.quality.shadowsize == 256
        video.render(rendered, HEIGHT, WIDTH)  # its context was made with the model's 2048
        video.FrameRecorder(rendered, [].append, HEIGHT, WIDTH)
        assert rendered.physics.model.vis.quality.shadowsize == 2048
    finally:
        fresh.close()
        rendered.close()
