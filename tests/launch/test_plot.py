"""Learning curves from run directories (``rlplat.utils.curves``) and the ``rlplat plot`` command.

The runs are written with the project's own ``MetricsLogger`` (JSONL only),
so the files have exactly the format real runs write.
"""

import csv
import json
import os

import numpy as np
import pytest

from cli_testlib import assert_usage_error, run_rlplat
from rlplat.utils import curves
from rlplat.utils import loggers


def _write_run(path, seed, sigma, evals, learner=()):
    """A run directory: config.json, evaluator records ``(actor_steps, learner_steps, return)``."""
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"agent": {"sigma": sigma, "layer_sizes": [8, 8]}, "env": "cartpole:swingup",
                   "seed": seed, "max_actor_steps": 1000 * seed}, f)
    evaluator = loggers.MetricsLogger(path, "evaluator", tensorboard=False)
    for actor_steps, learner_steps, value in evals:
        evaluator.write(actor_steps, {"eval_return": value, "learner_steps": learner_steps})
    evaluator.close()
    log = loggers.MetricsLogger(path, "learner", tensorboard=False)
    for learner_steps, actor_steps, loss in learner:
        log.write(learner_steps, {"critic_loss": loss, "actor_steps": actor_steps})
    log.close()
    return path


@pytest.fixture
def three_runs(tmp_path):
    # Two seeds of sigma 0.3 (different eval grids), one run of sigma 0.2.
    a = _write_run(str(tmp_path / "a"), 0, 0.3, [(0, 0, 0.0), (100, 10, 100.0), (200, 20, 300.0)],
                   learner=[(10, 100, 5.0), (20, 200, float("nan")), (30, 300, 1.0)])
    b = _write_run(str(tmp_path / "b"), 1, 0.3, [(0, 0, 50.0), (200, 25, 150.0), (300, 40, 0.0)])
    c = _write_run(str(tmp_path / "c"), 0, 0.2, [(0, 0, 10.0), (100, 10, 20.0)])
    return a, b, c


def test_runs_group_by_config_apart_from_seed_and_budget(three_runs):
    runs = [curves.load_run(p) for p in three_runs]
    groups = curves.group(runs)
    assert {k: [r.name for r in v] for k, v in groups.items()} == {
        "sigma=0.3": ["a", "b"], "sigma=0.2": ["c"]}
    one = curves.group(runs[:2])  # nothing differs: named after the task
    assert list(one) == ["cartpole:swingup"]


def test_band_is_mean_min_max_of_interpolated_runs(three_runs):
    a, b, _ = (curves.load_run(p) for p in three_runs)
    pa, pb = curves.points(a, "eval_return", "env_steps"), curves.points(b, "eval_return", "env_steps")
    np.testing.assert_array_equal(pa, [[0, 0], [100, 100], [200, 300]])
    result = curves.band([pa, pb], num_points=5)  # common range 0..200: x = 0, 50, 100, 150, 200
    np.testing.assert_allclose(result["x"], [0, 50, 100, 150, 200])
    # a: 0, 50, 100, 200, 300;  b (50 -> 150 over 0..200): 50, 75, 100, 125, 150.
    np.testing.assert_allclose(result["mean"], [25, 62.5, 100, 162.5, 225])
    np.testing.assert_allclose(result["min"], [0, 50, 100, 125, 150])
    np.testing.assert_allclose(result["max"], [50, 75, 100, 200, 300])
    assert set(result["n"]) == {2}


def test_x_axes_and_non_finite_values(three_runs):
    a = curves.load_run(three_runs[0])
    np.testing.assert_array_equal(curves.points(a, "eval_return", "learner_steps")[:, 0], [0, 10, 20])
    # The NaN loss is left out; learner records give env steps through actor_steps.
    np.testing.assert_array_equal(curves.points(a, "critic_loss", "env_steps"), [[100, 5.0], [300, 1.0]])
    wall = curves.points(a, "eval_return", "wall_time")
    assert wall[0, 0] >= 0 and np.all(np.diff(wall[:, 0]) >= 0)
    with pytest.raises(curves.CurveError, match="unknown x axis"):
        curves.points(a, "eval_return", "episodes")


def test_a_resumed_run_keeps_the_last_value_at_a_step(tmp_path):
    path = _write_run(str(tmp_path / "r"), 0, 0.3, [(0, 0, 1.0), (100, 10, 2.0)])
    log = loggers.MetricsLogger(path, "evaluator", tensorboard=False)  # the resumed run re-logs 100
    log.write(100, {"eval_return": 7.0, "learner_steps": 10})
    log.close()
    np.testing.assert_array_equal(curves.points(curves.load_run(path), "eval_return", "env_steps"),
                                  [[0, 1.0], [100, 7.0]])


def test_plot_command_writes_the_image_and_the_numbers(three_runs, tmp_path):
    out, table = str(tmp_path / "curves.png"), str(tmp_path / "curves.csv")
    result = run_rlplat("plot", *three_runs, "--metric", "eval_return", "-o", out, "--csv", table,
                        timeout=120)
    assert result.returncode == 0, result.stderr
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(table) as f:
        rows = list(csv.DictReader(f))
    groups = {r["group"] for r in rows}
    assert groups == {"sigma=0.3", "sigma=0.2"}
    last = [r for r in rows if r["group"] == "sigma=0.3"][-1]  # at x=200: a 300, b 150
    assert (float(last["x"]), float(last["mean"]), float(last["min"]), float(last["max"]),
            int(last["runs"])) == (200.0, 225.0, 150.0, 300.0, 2)
    assert "sigma=0.3: 2 run(s)" in result.stdout


@pytest.mark.parametrize("args, fragment", [
    (["{missing}"], "is not a directory"),
    (["{empty}"], "has no metrics.jsonl"),
    (["{run}", "--metric", "no_such"], "pass --metric one of: actor_steps, critic_loss, eval_return, learner_steps"),
    (["{run}", "-o", "{tmp}/curves.txt"], "use a .png, .svg or .pdf"),
    (["{run}", "-o", "{tmp}/no/such/dir/c.png"], "does not exist"),
    (["{run}", "--x", "episodes"], "--x"),
])
def test_plot_bad_input_is_one_line_exit_2(three_runs, tmp_path, args, fragment):
    (tmp_path / "empty").mkdir()
    names = {"missing": str(tmp_path / "missing"), "empty": str(tmp_path / "empty"),
             "run": three_runs[0], "tmp": str(tmp_path)}
    assert_usage_error(run_rlplat("plot", *[a.format(**names) for a in args], timeout=120), fragment)
