"""``rlplat eval``: a real run's checkpointed policy, restored alone, acting greedily, on video.

The bad-input cases use hand-made run directories (config.json, run_info.json,
empty ``ckpt-N.index`` files): each must be refused with one line and exit 2
before TensorFlow is imported (a stand-in ``tensorflow`` that fails on import
is first on the path). The end-to-end case, on a real, tiny D4PG run (its
checkpointed policy restored alone, acting greedily, on video), lives in
test_export.py, beside the export round trip, so that one training run serves
both (``test_eval_restores_the_checkpoints_policy_and_repeats_its_returns``).
"""

import os

import numpy as np
import pytest

from cli_testlib import run_rlplat_as_user
from rlplat import run_dir
from rlplat.utils import run_info

NO_TF = "stand-in tensorflow: a bad input must be refused before TensorFlow is imported"


def _fake_run(logdir, env="cartpole:swingup", steps=(5, 10)):
    config = {"agent": {"policy_layer_sizes": [32, 32]}, "env": env, "env_kwargs": {}, "seed": 0}
    run_info.write_run_info(str(logdir), config, extra={"builder": "D4PGBuilder"})
    os.makedirs(logdir / "checkpoints", exist_ok=True)
    for step in steps:
        (logdir / "checkpoints" / f"ckpt-{step}.index").write_bytes(b"")
    if steps:  # the state file names them, as the Checkpointer's would
        run_dir.write_state(str(logdir / "checkpoints"), [f"ckpt-{s}" for s in steps])
    return str(logdir)


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    base = tmp_path_factory.mktemp("eval-bad")
    stand_in = tmp_path_factory.mktemp("no-tf")
    (stand_in / "tensorflow").mkdir()
    (stand_in / "tensorflow" / "__init__.py").write_text(f"raise ImportError({NO_TF!r})\n")
    (base / "no-ckpt").mkdir()
    bad_config = _fake_run(base / "bad-config")
    with open(os.path.join(bad_config, "config.json"), "w") as f:
        f.write('{"agent": {"policy_layer')  # truncated
    bad_counters = _fake_run(base / "bad-counters")
    with open(os.path.join(bad_counters, "checkpoints", "counters.json"), "w") as f:
        f.write("[1, 2]")
    return {"run": _fake_run(base / "run"), "gym": _fake_run(base / "gym", env="gym:CartPole-v1"),
            "badcfg": bad_config, "badcounters": bad_counters,
            "empty": _fake_run(base / "no-ckpt", steps=()), "base": str(base),
            "stand_in": str(stand_in)}


@pytest.mark.parametrize("args, fragments", [
    (["--logdir", "{base}/missing"], ["is not a directory"]),
    (["--logdir", "{base}"], ["config.json is missing"]),
    (["--logdir", "{empty}"], ["has no checkpoint"]),
    (["--logdir", "{run}", "--checkpoint", "7"], ["--checkpoint 7", "it keeps 5, 10"]),
    (["--logdir", "{run}", "--episodes", "0"], ["--episodes must be in 1..100,000"]),
    (["--logdir", "{run}", "--episodes", "1000000000000"], ["--episodes must be in 1..100,000"]),
    (["--logdir", "{run}", "--seed", "-1"], ["--seed must be in 0..4294967295"]),
    (["--logdir", "{run}", "--seed", "4294967296"], ["--seed must be in 0..4294967295"]),
    (["--logdir", "{run}", "--video", "{base}/out.gif", "--video-fps", "nan"], ["--video-fps must be > 0"]),
    (["--logdir", "{badcfg}"], ["run config", "damaged", "restore it"]),
    (["--logdir", "{badcounters}"], ["counters file", "not a JSON object"]),
    (["--logdir", "{run}", "--video", "{base}/missing/out.gif"], ["--video", "does not exist"]),
    (["--logdir", "{run}", "--video", "{base}/out.avi"], ["unknown extension", ".gif or .mp4"]),
    (["--logdir", "{run}", "--video", "{base}/out.gif", "--video-size", "64"], ["WIDTHxHEIGHT"]),
    (["--logdir", "{run}", "--video", "{base}/out.gif", "--video-fps", "0"], ["--video-fps must be > 0"]),
    (["--logdir", "{gym}", "--video", "{base}/out.gif"], ["gym:CartPole-v1", "drop --video"]),
    (["--checkpoint", "3"], ["--logdir"]),
])
def test_bad_input_is_one_line_exit_2_before_tensorflow(places, args, fragments):
    argv = [a.format(**places) for a in args]
    result, seconds = run_rlplat_as_user("eval", *argv, cwd=places["base"],
                                         extra_path=places["stand_in"])
    lines = result.stderr.splitlines()
    assert NO_TF not in result.stderr, "TensorFlow was imported before the input was refused"
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("rlplat: error: "), result.stderr
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert seconds < 120, seconds  # never blocks; not a speed test (TensorFlow is checked above)
    assert not os.path.exists(os.path.join(places["base"], "out.gif"))


def test_impala_policy_comes_back_from_a_learner_style_checkpoint(tmp_path):
    """IMPALA's hook: the ``network`` key, ``acting_variables`` order; optimizer state left on disk."""
    import tensorflow as tf

    import rlplat_envs as envs
    from rlplat_agents.impala.builder import IMPALABuilder
    from rlplat_agents.impala.config import IMPALAConfig
    from rlplat import evaluation, specs

    builder = IMPALABuilder(config=IMPALAConfig(layer_sizes=(16, 16)))
    environment = envs.make_environment("gym:CartPole-v1", seed=0)
    try:
        spec = specs.make_environment_spec(environment)
        objects, variables = builder.make_policy_network(spec)
        for i, v in enumerate(variables):  # values no fresh network has
            v.assign(tf.fill(v.shape, float(i + 1) / 100.0))
        extra = tf.Variable(3.0)  # stands for the optimizer and counters the learner saves too
        tf.train.Checkpoint(**objects, learner_steps=extra).write(str(tmp_path / "ckpt-9"))
        source = evaluation.restore_policy(builder, spec, str(tmp_path / "ckpt-9"), 9)
        assert source.get_variables(["policy"])[0] == 9
        assert len(source.arrays) == len(variables)
        for i, (array, v) in enumerate(zip(source.arrays, variables)):
            np.testing.assert_array_equal(array, np.full(v.shape, (i + 1) / 100.0, np.float32))
        returns = [s["episode_return"] for s in evaluation.run_episodes(builder, environment, source, 2, 0)]
    finally:
        environment.close()
    assert len(returns) == 2 and all(r >= 1 for r in returns)
