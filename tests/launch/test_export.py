"""``rlplat export``: a run's greedy policy as a SavedModel that acts as ``rlplat eval`` does, without rlplat.

* Round trip (real, tiny D4PG run on Ray and MuJoCo): the export, loaded in a
  fresh process that imports only TensorFlow, NumPy and dm_control
  (``exported_policy_rollout.py``), runs the episodes ``rlplat eval`` runs
  with the same seed: the same returns (as eval prints them, and to 1e-5
  relative), and on every observation eval's actor acted on, actions within
  1e-6 of eval's. Along the two closed-loop episodes the actions drift further
  apart (float32 round-off that MuJoCo carries on; bounded at 1e-4).
* DDPG and IMPALA (MLP; continuous and discrete; bounds other than [-1, 1]):
  hand-made checkpoints of runs, exported by the command, act on every
  observation of an evaluation episode as the evaluation actor does.
* ``rlplat eval`` on the same run (its end-to-end case lives here so that one
  training run serves both): the checkpoint's policy restored alone, acting
  greedily, on video; the named checkpoint repeats the returns, and the
  weights served are the checkpoint's policy weights, exactly.
* Bad input: one line, exit 2, before TensorFlow is imported (a stand-in
  ``tensorflow`` that fails on import is first on the path); the bad-input
  matrix (test_bad_inputs.py) has the same cases against real runs.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from cli_testlib import run_rlplat_as_user
from rlplat import run_dir
from rlplat.utils import run_info

HERE = os.path.dirname(os.path.abspath(__file__))
ROLLOUT = os.path.join(HERE, "exported_policy_rollout.py")
NO_TF = "stand-in tensorflow: a bad input must be refused before TensorFlow is imported"
# Enough learner steps (samples-per-insert 16) that the policy's tanh output is far from linear.
TINY_D4PG = ["train", "d4pg", "--env", "cartpole:swingup", "--max-actor-steps", "2000",
             "--num-actors", "1", "--policy-layer-sizes", "32,32", "--critic-layer-sizes", "32,32",
             "--global-batch-size", "32", "--min-replay-size", "32", "--samples-per-insert", "16",
             "--eval-episodes", "1"]
SEED, EPISODES = 3, 2
RETURN_LINE = re.compile(r"^episode (\d+): return (-?[\d.]+) \((\d+) steps", re.MULTILINE)


def _fake_run(logdir, builder, agent, env="cartpole:swingup", steps=(5, 10)):
    """A run directory by hand: config.json, run_info.json and empty checkpoints the state file names."""
    config = {"agent": agent, "env": env, "env_kwargs": {}, "seed": 0}
    run_info.write_run_info(str(logdir), config, extra={"builder": builder})
    os.makedirs(os.path.join(logdir, "checkpoints"), exist_ok=True)
    for step in steps:
        with open(os.path.join(logdir, "checkpoints", f"ckpt-{step}.index"), "wb"):
            pass
    if steps:
        run_dir.write_state(os.path.join(logdir, "checkpoints"), [f"ckpt-{s}" for s in steps])
    return str(logdir)


# ------------------------------------------------------------------ bad input
@pytest.fixture(scope="module")
def places(tmp_path_factory):
    base = tmp_path_factory.mktemp("export-bad")
    stand_in = tmp_path_factory.mktemp("no-tf")
    (stand_in / "tensorflow").mkdir()
    (stand_in / "tensorflow" / "__init__.py").write_text(f"raise ImportError({NO_TF!r})\n")
    run = _fake_run(base / "run", "D4PGBuilder", {"policy_layer_sizes": [32, 32]})
    lstm = _fake_run(base / "lstm", "IMPALABuilder", {"core": "lstm"})
    bad_config = _fake_run(base / "bad-config", "D4PGBuilder", {})
    with open(os.path.join(bad_config, "config.json"), "w") as f:
        f.write('{"agent": {"policy_layer')  # truncated
    (base / "full").mkdir()
    (base / "full" / "saved_model.pb").write_bytes(b"an earlier export")
    (base / "empty").mkdir()
    (base / "a-file").write_text("not a directory\n")
    return {"base": str(base), "stand_in": str(stand_in), "run": run, "lstm": lstm, "badcfg": bad_config,
            "full": str(base / "full"), "empty": str(base / "empty"), "file": str(base / "a-file")}


@pytest.mark.parametrize("args, fragments", [
    (["--logdir", "{base}/missing", "-o", "{base}/out"], ["is not a directory"]),
    (["--logdir", "{base}", "-o", "{base}/out"], ["config.json is missing"]),
    (["--logdir", "{badcfg}", "-o", "{base}/out"], ["run config", "damaged", "restore it"]),
    (["--logdir", "{run}", "--checkpoint", "7", "-o", "{base}/out"], ["--checkpoint 7", "it keeps 5, 10"]),
    (["--logdir", "{run}", "--checkpoint", "-1", "-o", "{base}/out"], ["--checkpoint is a learner step"]),
    (["--logdir", "{lstm}", "-o", "{base}/out"], ["--core lstm", "export a --core mlp run"]),
    (["--logdir", "{run}", "-o", "{full}"], ["exists and is not empty", "new or empty directory"]),
    (["--logdir", "{run}", "-o", "{file}"], ["is a file", "new directory"]),
    (["--logdir", "{run}", "-o", "{file}/out"], ["does not exist", "create it"]),
    (["--logdir", "{run}", "-o", "/proc/rlplat-export"], ["cannot write -o /proc/rlplat-export"]),
    (["--logdir", "{run}"], ["-o/--output"]),
])
def test_bad_input_is_one_line_exit_2_before_tensorflow(places, args, fragments):
    argv = [a.format(**places) for a in args]
    before = sorted(os.listdir(places["base"]))
    result, seconds = run_rlplat_as_user("export", *argv, cwd=places["base"], extra_path=places["stand_in"])
    lines = result.stderr.splitlines()
    assert NO_TF not in result.stderr, "TensorFlow was imported before the input was refused"
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("rlplat: error: "), result.stderr
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert seconds < 120, seconds  # never blocks; not a speed test (TensorFlow is checked above)
    assert sorted(os.listdir(places["base"])) == before  # no output, no staging folder left
    assert os.listdir(places["empty"]) == [] and os.listdir(places["full"]) == ["saved_model.pb"]


# ------------------------------------------------------------ the round trip
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A real D4PG run (Ray, 1 actor, 2000 env steps) with its final checkpoint; export and eval share it."""
    base = tmp_path_factory.mktemp("export-run")
    logdir = base / "run"
    result, _ = run_rlplat_as_user(*TINY_D4PG, "--logdir", str(logdir), cwd=str(base), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    # What a user's terminal shows: no TensorFlow start-up lines (the driver imports none).
    assert "register cuDNN factory" not in result.stdout + result.stderr, result.stderr[-3000:]
    with open(logdir / "run_info.json", encoding="utf-8") as f:
        assert json.load(f)["driver_tensorflow"] is False
    return str(logdir)


class _Recorder:
    """Wraps an rlplat environment; keeps the observations the actor acts on and the actions the bare task gets."""

    def __init__(self, environment):
        import rlplat_envs as envs

        self.actions, self.observations, rescale = [], [], None
        layer = environment
        while layer is not None:
            if isinstance(layer, envs.CanonicalActionWrapper):
                rescale = layer.rescale
            layer = getattr(layer, "environment", None)
        actions, observations = self.actions, self.observations

        class Recording(envs.EnvironmentWrapper):
            def reset(self):
                timestep = self._environment.reset()
                observations.append(np.array(timestep.observation))
                return timestep

            def step(self, action):
                actions.append(np.array(rescale(action) if rescale else action, np.float64))
                timestep = self._environment.step(action)
                if not timestep.last():
                    observations.append(np.array(timestep.observation))
                return timestep

        self.environment = Recording(environment)


def _eval_in_process(logdir, seed, episodes):
    """``rlplat eval``'s episodes, run here through ``rlplat.evaluation``.

    Returns the returns, and per episode the bare task's actions and the
    observations the actor acted on (one per action).
    """
    import rlplat_envs as envs
    from rlplat import evaluation, specs

    record = evaluation.read_run(logdir)
    step, prefix = record.checkpoint()
    builder = evaluation.make_builder(record)
    environment = envs.make_environment(record.env, seed=seed, **record.env_kwargs)
    try:
        recorder = _Recorder(environment)
        source = evaluation.restore_policy(builder, specs.make_environment_spec(environment), prefix, step)
        stats = list(evaluation.run_episodes(builder, recorder.environment, source, episodes, seed))
    finally:
        environment.close()
    actions, observations, start = [], [], 0
    for length in (s["episode_length"] for s in stats):
        actions.append(np.array(recorder.actions[start:start + length]))
        observations.append(np.array(recorder.observations[start:start + length]))
        start += length
    return [s["episode_return"] for s in stats], actions, observations


def _rollout_in_a_fresh_process(export_dir, out, observations):
    """The exported policy's episodes in a process that has only TensorFlow, NumPy and dm_control.

    ``observations`` (a .npz file) are acted on too, in one batched call per array.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of this checkout
    env.update(MUJOCO_GL="osmesa", TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, ROLLOUT, export_dir, "--seed", str(SEED), "--episodes",
                             str(EPISODES), "--out", out, "--observations", observations],
                            env=env, cwd=os.path.dirname(out),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_exported_policy_runs_evals_episodes_without_rlplat(tiny_run, tmp_path):
    export_dir = str(tmp_path / "policy")
    result, _ = run_rlplat_as_user("export", "--logdir", tiny_run, "-o", export_dir, cwd=str(tmp_path),
                                   timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "signature 'serving_default'" in result.stdout
    with open(os.path.join(export_dir, "policy.json"), encoding="utf-8") as f:
        policy = json.load(f)
    assert policy["environment"] == {"name": "cartpole:swingup", "kwargs": {}}
    assert [(p["name"], p["start"], p["stop"]) for p in policy["observation"]["parts"]] == [
        ("position", 0, 3), ("velocity", 3, 5)]
    assert policy["action"] == {"kind": "bounded", "shape": [1], "dtype": "float64", "minimum": [-1.0],
                                "maximum": [1.0], "rescaled_from": [-1.0, 1.0]}
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".policy.export-")]  # staging renamed

    cli = run_rlplat_as_user("eval", "--logdir", tiny_run, "--episodes", str(EPISODES), "--seed", str(SEED),
                             cwd=str(tmp_path), timeout=300)[0]
    assert cli.returncode == 0, cli.stderr[-3000:]
    cli_returns = [float(line.split("return ")[1].split()[0]) for line in cli.stdout.splitlines()
                   if line.startswith("episode ")]
    eval_returns, eval_actions, eval_observations = _eval_in_process(tiny_run, SEED, EPISODES)
    observations = str(tmp_path / "observations.npz")
    np.savez(observations, **{f"episode{i}": obs.astype(np.float32) for i, obs in enumerate(eval_observations)})
    exported = _rollout_in_a_fresh_process(export_dir, str(tmp_path / "rollout.json"), observations)

    assert exported["rlplat_modules"] == []  # never imported rlplat, rlplat_envs or rlplat_agents
    assert exported["action_dtype"] == "float64"
    assert max(exported["batch_gaps"]) <= 1e-6  # a batch of observations acts as one at a time
    # The policy: on every observation eval's actor acted on, the exported actions are eval's.
    policy_gap = max(float(np.max(np.abs(np.array(exported["replayed_actions"][f"episode{i}"]).reshape(a.shape) - a)))
                     for i, a in enumerate(eval_actions))
    # The episodes, each side on its own observations.
    episode_gap = max(float(np.max(np.abs(np.array(mine).reshape(theirs.shape) - theirs)))
                      for mine, theirs in zip(exported["actions"], eval_actions))
    print(f"\nrlplat eval returns {cli_returns} (in process {eval_returns}); exported {exported['returns']}; "
          f"largest action difference {policy_gap:.3g} on eval's observations, {episode_gap:.3g} along the "
          f"episodes; largest |action| {max(float(np.max(np.abs(a))) for a in eval_actions):.3f}")
    assert [len(a) for a in exported["actions"]] == [len(a) for a in eval_actions]
    assert policy_gap <= 1e-6, policy_gap
    # NumPy's and TensorFlow's float32 sums run in other orders (~1e-7 apart), and MuJoCo carries that on
    # along 1000 closed-loop steps, growing it: how far depends on the CPU's kernels (seen: actions 1e-7 to
    # 6e-5 apart, returns up to 1.1e-5 relative). The policy itself is held to 1e-6 above; these bounds only
    # say that the episodes are the same episodes (a different policy moves the return by whole units).
    assert episode_gap <= 1e-3, episode_gap
    np.testing.assert_allclose(exported["returns"], eval_returns, rtol=1e-3, atol=0)
    # `rlplat eval` is the in-process eval, printed with 3 decimals; the exported returns reach it through
    # the in-process ones, whose drift (above) may already carry them past the printed rounding.
    np.testing.assert_allclose(cli_returns, eval_returns, rtol=0, atol=5e-4 + 1e-9)
    # A policy that only ever outputs ~0 would pass anything: this one uses its tanh's range.
    assert max(float(np.max(np.abs(a))) for a in eval_actions) > 0.5


# ------------------------------------------------- rlplat eval on the same run
def _returns(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return [float(r) for _, r, _ in RETURN_LINE.findall(result.stdout)]


def _policy_values_in_checkpoint(prefix):
    """The ``policy/`` weights a D4PG checkpoint holds (not its optimizer slots, not the target)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    return [reader.get_tensor(name) for name, _ in tf.train.list_variables(prefix)
            if name.startswith("policy/") and ".OPTIMIZER_SLOT" not in name
            and name.endswith("/.ATTRIBUTES/VARIABLE_VALUE")]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_eval_restores_the_checkpoints_policy_and_repeats_its_returns(tiny_run, tmp_path):
    """``rlplat eval`` (test_eval.py has its bad-input cases): a real run's checkpointed policy, on video."""
    from rlplat import evaluation
    import rlplat_envs as envs

    gif = str(tmp_path / "policy.gif")
    first = run_rlplat_as_user("eval", "--logdir", tiny_run, "--episodes", "2", "--seed", "3",
                               "--video", gif, "--video-size", "64x48", "--video-fps", "5",
                               cwd=str(tmp_path), timeout=300)[0]
    returns = _returns(first)
    assert len(returns) == 2, first.stdout
    assert re.search(r"^mean return -?[\d.]+ over 2 episode", first.stdout, re.MULTILINE)
    # The video: every episode's frames (every 20th control step at 5 fps), at the asked size.
    frames = int(re.search(r"video: .* \((\d+) frames, 64x48", first.stdout).group(1))
    with Image.open(gif) as image:
        assert image.size == (64, 48)
        assert image.n_frames == frames == 2 * (1 + 1000 // 20)

    # Same checkpoint (named this time) and seed, no video: the same returns.
    record = evaluation.read_run(tiny_run)
    step, prefix = record.checkpoint()
    second = run_rlplat_as_user("eval", "--logdir", tiny_run, "--episodes", "2", "--seed", "3",
                                "--checkpoint", str(step), cwd=str(tmp_path), timeout=300)[0]
    np.testing.assert_allclose(_returns(second), returns, rtol=0, atol=1e-6)

    # In this process: the weights served are the checkpoint's policy weights, exactly.
    builder = evaluation.make_builder(record)
    environment = envs.make_environment(record.env, seed=3, **record.env_kwargs)
    try:
        from rlplat import specs

        spec = specs.make_environment_spec(environment)
        source = evaluation.restore_policy(builder, spec, prefix, step)
        stored = _policy_values_in_checkpoint(prefix)
        assert len(stored) == len(source.arrays) == 8  # 3 dense (w, b) + layer norm (gamma, beta)
        for array in source.arrays:
            assert sum(s.shape == array.shape and np.array_equal(s, array) for s in stored) == 1
        _, fresh = builder.make_policy_network(spec)
        assert not all(np.array_equal(f.numpy(), a) for f, a in zip(fresh, source.arrays))
        # And they act as the command said: the same two returns.
        again = [s["episode_return"] for s in evaluation.run_episodes(builder, environment, source, 2, 3)]
    finally:
        environment.close()
    np.testing.assert_allclose(again, returns, rtol=0, atol=5e-4)  # printed with 3 decimals


# ------------------------------------------------------ DDPG and IMPALA (MLP)
# (case, builder, agent config, environment, scale of the output layer's weights: a tanh output
# saturates at 3, a clipped one stays in float32's 1e-6 at 1).
CHECKPOINTED = [
    ("ddpg-pendulum", "DDPGBuilder", {"policy_layer_sizes": [16, 16], "critic_layer_sizes": [16, 16]},
     "gym:Pendulum-v1", 10.0),
    ("impala-cartpole-swingup", "IMPALABuilder", {"layer_sizes": [16, 16]}, "cartpole:swingup", 3.0),
    ("impala-clip-walker", "IMPALABuilder", {"layer_sizes": [16], "squash": "clip"}, "walker:walk", 1.0),
    ("impala-discrete", "IMPALABuilder", {"layer_sizes": [16, 16]}, "gym:CartPole-v1", 1.0),
]


def _checkpointed_run(logdir, builder_name, agent, env_name, output_scale):
    """A run directory whose ckpt-9 holds a policy with weights no fresh network has."""
    import tensorflow as tf

    import rlplat_envs as envs
    from rlplat import evaluation, specs

    _fake_run(logdir, builder_name, agent, env=env_name, steps=())
    builder = evaluation.make_builder(evaluation.read_run(str(logdir)))
    environment = envs.make_environment(env_name, seed=0)
    try:
        objects, variables = builder.make_policy_network(specs.make_environment_spec(environment))
    finally:
        environment.close()
    rng = np.random.default_rng(0)
    last_kernel = max(i for i, v in enumerate(variables) if len(v.shape) == 2)
    for i, v in enumerate(variables):  # trained-like scales (std 1/sqrt(fan in)); an output that saturates
        scale = (output_scale if i == last_kernel else 1.0) / np.sqrt(v.shape[0]) if len(v.shape) == 2 else 0.1
        values = rng.normal(0.0, scale, v.shape)
        if "obs_var" in v.name:
            values = np.abs(values) + 0.5
        v.assign(values.astype(np.float32))
    prefix = run_dir.checkpoint_prefix(str(logdir), 9)
    tf.train.Checkpoint(**objects).write(prefix)
    run_dir.write_state(run_dir.checkpoints_dir(str(logdir)), [prefix])
    return str(logdir)


def _greedy_actor(logdir, environment):
    """The evaluation actor ``rlplat eval`` builds for ``logdir``, and the rescale of ``environment``'s stack."""
    import rlplat_envs as envs
    from rlplat import evaluation, specs

    record = evaluation.read_run(logdir)
    step, prefix = record.checkpoint()
    builder = evaluation.make_builder(record)
    spec = specs.make_environment_spec(environment)
    actor = builder.make_actor(spec, evaluation.restore_policy(builder, spec, prefix, step), None, 0, 0,
                               evaluation=True)
    layer = environment
    while layer is not None and not isinstance(layer, envs.CanonicalActionWrapper):
        layer = getattr(layer, "environment", None)
    return lambda obs: np.array(layer.rescale(actor.select_action(obs)) if layer else actor.select_action(obs))


@pytest.mark.multiprocess
@pytest.mark.parametrize("case, builder_name, agent, env_name, output_scale", CHECKPOINTED,
                         ids=[c[0] for c in CHECKPOINTED])
def test_export_acts_as_the_evaluation_actor(tmp_path, case, builder_name, agent, env_name, output_scale):
    import tensorflow as tf

    import rlplat_envs as envs

    logdir = _checkpointed_run(tmp_path / "run", builder_name, agent, env_name, output_scale)
    export_dir = str(tmp_path / "policy")
    os.mkdir(export_dir)  # an empty directory is a fine -o
    stand_in = tmp_path / "no-ray"  # export needs no Ray: a stand-in that fails on import is first on the path
    (stand_in / "ray").mkdir(parents=True)
    (stand_in / "ray" / "__init__.py").write_text("raise ImportError('rlplat export imported Ray')\n")
    result, _ = run_rlplat_as_user("export", "--logdir", logdir, "-o", export_dir, cwd=str(tmp_path),
                                   timeout=300, extra_path=str(stand_in))
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(export_dir, "policy.json"), encoding="utf-8") as f:
        action_spec = json.load(f)["action"]
    model = tf.saved_model.load(export_dir)

    # An evaluation episode's observations, and as many more drawn at random around them.
    _, eval_actions, observations = _eval_in_process(logdir, 1, 1)
    episode = model(tf.constant(observations[0])).numpy()
    np.testing.assert_allclose(episode, np.array(eval_actions[0]).reshape(episode.shape), rtol=0, atol=1e-6)
    rng = np.random.default_rng(1)
    seen = observations[0][rng.integers(len(observations[0]), size=256)]
    wide = (seen + rng.normal(0.0, 0.5, seen.shape) * (np.std(observations[0], axis=0) + 0.1)).astype(np.float32)
    environment = envs.make_environment(env_name, seed=0)
    try:
        act = _greedy_actor(logdir, environment)
        want = np.stack([act(obs) for obs in wide])
    finally:
        environment.close()
    got = model(tf.constant(wide)).numpy()
    assert str(got.dtype) == action_spec["dtype"]
    got = got.reshape(want.shape)
    print(f"\n{case}: largest action difference {float(np.max(np.abs(got - want))):.3g} over "
          f"{len(episode)} + {len(want)} observations; actions span {float(want.min()):.3f}..{float(want.max()):.3f}")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    if action_spec["kind"] == "bounded":
        low, high = np.array(action_spec["minimum"]), np.array(action_spec["maximum"])
        assert np.all(got >= low) and np.all(got <= high)
        # Far from the middle somewhere: the squash and the rescale both matter.
        assert np.max(np.abs(got - (low + high) / 2) / ((high - low) / 2)) > 0.5
    else:
        assert len(set(got.tolist())) == action_spec["num_values"]  # every action chosen somewhere
