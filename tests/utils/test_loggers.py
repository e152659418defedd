"""MetricsLogger: JSONL lines, append on reopen, purge on resume, TensorBoard events."""

import glob
import json
import os

import numpy as np
import tensorflow as tf

from rlplat.utils import loggers


def _lines(logdir):
    with open(os.path.join(logdir, loggers.JSONL_NAME)) as f:
        return [json.loads(line) for line in f]


def test_jsonl_lines_parse_and_append_on_reopen(tmp_path):
    logdir = str(tmp_path)
    with loggers.make_logger(logdir, "learner") as log:
        log.write(1, {"loss": np.float32(0.5), "count": np.int64(3), "t": tf.constant(2.0)})
    with loggers.make_logger(logdir, "learner") as log:  # e.g. a resumed run
        log.write(2, {"loss": 0.25})
    with loggers.make_logger(logdir, "evaluator") as log:
        log.write(2, {"accuracy": 0.9})
    records = _lines(logdir)
    assert [(r["role"], r["step"]) for r in records] == [("learner", 1), ("learner", 2), ("evaluator", 2)]
    assert records[0]["loss"] == 0.5 and records[0]["count"] == 3 and records[0]["t"] == 2.0
    assert all(isinstance(r["wall_time"], float) for r in records)


def test_purge_drops_only_this_roles_later_lines_and_damaged_ones(tmp_path):
    logdir = str(tmp_path)
    with loggers.make_logger(logdir, "learner") as log:
        for step in (10, 20, 30):
            log.write(step, {"loss": 1.0})
    with loggers.make_logger(logdir, "evaluator") as log:
        log.write(30, {"accuracy": 0.5})
    with open(os.path.join(logdir, loggers.JSONL_NAME), "a") as f:
        f.write('{"step": 40, "ro')  # cut short by a crash
    with loggers.make_logger(logdir, "learner", purge_after_step=20) as log:
        log.write(30, {"loss": 0.5})
    assert [(r["role"], r["step"]) for r in _lines(logdir)] == [
        ("learner", 10), ("learner", 20), ("evaluator", 30), ("learner", 30)]


def test_damaged_last_line_does_not_swallow_the_next_record(tmp_path):
    path = tmp_path / loggers.JSONL_NAME
    path.write_text('{"step": 1, "role": "learner"}\n{"step": 2, "ro')
    with loggers.make_logger(str(tmp_path), "learner", tensorboard=False) as log:
        log.write(3, {"loss": 1.0})
    assert [r["step"] for r in loggers.read_jsonl(str(path))] == [1, 3]


def test_tensorboard_events_hold_the_scalars_per_role(tmp_path):
    with loggers.make_logger(str(tmp_path), "learner") as log:
        log.write(5, {"loss": 0.125})
        log.write(6, {"loss": 0.0625})
    files = glob.glob(os.path.join(tmp_path, "tb", "learner", "events.out.tfevents.*"))
    assert len(files) == 1
    seen = []
    for event in tf.compat.v1.train.summary_iterator(files[0]):
        for value in event.summary.value:
            seen.append((event.step, value.tag, float(tf.make_ndarray(value.tensor))))
    assert seen == [(5, "loss", 0.125), (6, "loss", 0.0625)]


def test_console_output_and_disabled_sinks(tmp_path):
    printed = []
    with loggers.MetricsLogger(str(tmp_path), "actor_0", tensorboard=False, jsonl=False,
                               console=True, print_fn=printed.append) as log:
        log.write(7, {"episode_return": 12.5})
    assert printed == ["[actor_0] step=7 episode_return=12.5"]
    assert os.listdir(tmp_path) == []


def test_config_markdown_flattens_nested_settings_into_one_row_each():
    text = loggers.config_markdown({"env": "cartpole:swingup", "agent": {"sigma": 0.3, "sizes": [256, 256]},
                                    "layout": {"note": "a|b"}, "empty": {}})
    assert text.splitlines() == [
        "| setting | value |", "|---|---|",
        "| `agent.sigma` | 0.3 |", "| `agent.sizes` | [256, 256] |", "| `empty` | {} |",
        "| `env` | cartpole:swingup |", "| `layout.note` | a&#124;b |"]


def test_write_text_puts_the_markdown_in_the_roles_tensorboard_events(tmp_path):
    logger = loggers.MetricsLogger(str(tmp_path), "learner")
    logger.write_text("config", "| a | b |", step=7)
    logger.close()
    texts = []
    for path in glob.glob(str(tmp_path / "tb" / "learner" / "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                texts.append((event.step, value.tag, tf.make_ndarray(value.tensor).item().decode()))
    assert texts == [(7, "config", "| a | b |")]
    # Text is for TensorBoard only: the metrics file stays one record per scalar write.
    assert loggers.read_jsonl(str(tmp_path / loggers.JSONL_NAME)) == []


def _values(logdir, role):
    out = []
    for path in sorted(glob.glob(os.path.join(logdir, "tb", role, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            out += [(event.step, value) for value in event.summary.value]
    return out


def test_images_read_back_through_tensorflow_pixel_for_pixel(tmp_path):
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, (5, 7, 1), dtype=np.uint8)
    rgb = rng.integers(0, 256, (4, 3, 3), dtype=np.uint8)
    with loggers.MetricsLogger(str(tmp_path), "evaluator", jsonl=False) as log:
        log.write_image("gray", gray, 3)
        log.write_image("rgb", rgb, 4)
    seen = {}
    for step, value in _values(str(tmp_path), "evaluator"):
        assert value.metadata.plugin_data.plugin_name == "images"
        width, height, png = tf.make_ndarray(value.tensor)
        seen[value.tag] = (step, int(width), int(height), tf.image.decode_png(png).numpy())
    assert seen["gray"][:3] == (3, 7, 5) and np.array_equal(seen["gray"][3], gray)
    assert seen["rgb"][:3] == (4, 3, 4) and np.array_equal(seen["rgb"][3], rgb)


def test_scalars_are_tagged_for_the_scalars_plugin_and_an_event_file_is_whole(tmp_path):
    with loggers.MetricsLogger(str(tmp_path), "learner", jsonl=False) as log:
        log.write(1, {"loss": 1.5, "flag": True, "name": "x"})  # only real numbers become scalars
    values = _values(str(tmp_path), "learner")
    assert [(s, v.tag, v.metadata.plugin_data.plugin_name, float(tf.make_ndarray(v.tensor)))
            for s, v in values] == [(1, "loss", "scalars", 1.5)]
    # Two loggers of one role in one second (a resume) write two files, never one shared one.
    with loggers.MetricsLogger(str(tmp_path), "learner", jsonl=False) as log:
        log.write(2, {"loss": 0.5})
    assert len(glob.glob(os.path.join(tmp_path, "tb", "learner", "events.*"))) == 2
    assert [s for s, _ in _values(str(tmp_path), "learner")] == [1, 2]


def test_the_logger_imports_no_tensorflow():
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top

    code = ("import sys, tempfile\nfrom rlplat.utils import loggers\n"
            "with loggers.make_logger(tempfile.mkdtemp(), 'learner') as log:\n"
            "    log.write(1, {'loss': 1.0}); log.write_text('config', '| a |')\n"
            "print('tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_resume_that_purges_role_after_role_loses_no_later_line(tmp_path):
    """The run's loggers open one after another, each purging its own role: the purge of
    a later one replaces the file under the handles of those opened before it."""
    logdir = str(tmp_path)
    with loggers.make_logger(logdir, "learner") as log:
        for step in (10, 20, 30):
            log.write(step, {"loss": 1.0})
    with loggers.make_logger(logdir, "evaluator") as log:
        log.write(300, {"eval_return": 1.0})
    learner = loggers.make_logger(logdir, "learner", purge_after_step=20)  # opened first
    evaluator = loggers.make_logger(logdir, "evaluator", purge_after_step=200)  # replaces the file
    learner.write(21, {"loss": 0.5})
    evaluator.write(201, {"eval_return": 2.0})
    learner.close()
    evaluator.close()
    assert [(r["role"], r["step"]) for r in _lines(logdir)] == [
        ("learner", 10), ("learner", 20), ("learner", 21), ("evaluator", 201)]
