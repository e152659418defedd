"""The GAN workload: spectral norm against NumPy's SVD, hinge losses by hand, 1 vs 2 replicas, learning, CLI."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.gan import learning, networks, train
from rlplat_agents.gan.config import GANConfig
from rlplat_agents.supervised import data
from rlplat import replication
from rlplat.utils import loggers


def test_spectral_norm_estimate_converges_to_the_largest_singular_value():
    layer = networks.SpectralNormDense(7, seed=3)
    layer.build((None, 5))
    for _ in range(50):  # each training call keeps one more power iteration
        layer(tf.zeros((1, 5)), training=True)
    largest = np.linalg.svd(layer.kernel.numpy(), compute_uv=False)[0]
    np.testing.assert_allclose(float(layer.sigma()), largest, rtol=1e-4)
    # The normalised kernel has spectral norm 1: the layer is 1-Lipschitz (bias aside).
    normalised = layer.kernel.numpy() / float(layer.sigma())
    np.testing.assert_allclose(np.linalg.svd(normalised, compute_uv=False)[0], 1.0, rtol=1e-4)


def test_inference_calls_leave_the_power_iteration_alone():
    layer = networks.SpectralNormDense(4, seed=0)
    layer.build((None, 3))
    before = layer.u.numpy().copy()
    layer(tf.ones((2, 3)), training=False)
    np.testing.assert_array_equal(layer.u.numpy(), before)


def test_hinge_losses_by_hand():
    real, fake = tf.constant([2.0, 0.5, -1.0]), tf.constant([-2.0, 0.0, 3.0])
    d_loss, g_loss = learning.hinge_losses(real, fake, tf.constant([1.0, -3.0]))
    # relu(1 - [2, .5, -1]) = [0, .5, 2] -> 2.5/3; relu(1 + [-2, 0, 3]) = [0, 1, 4] -> 5/3
    np.testing.assert_allclose(float(d_loss), 2.5 / 3 + 5 / 3, rtol=1e-6)
    np.testing.assert_allclose(float(g_loss), 1.0, rtol=1e-6)  # -mean([1, -3])


def test_mmd_is_zero_for_one_sample_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 4))
    assert learning.mmd(x, x, 1.0) == pytest.approx(0.0, abs=1e-12)
    near, far = learning.mmd(x, x + 0.1, 1.0), learning.mmd(x, x + 1.0, 1.0)
    assert 0 < near < far


def _train(num_replicas, steps):
    config = GANConfig(global_batch_size=32, num_steps=steps, steps_per_loop=steps)
    repl = replication.make_replicator(num_replicas)
    learner = learning.GANLearner(config, repl)
    batches = repl.distribute(data.make_input_fn(config.global_batch_size, config.seed))
    metrics = learner.train(batches, steps)
    weights = [v.numpy() for v in learner.generator.variables + learner.discriminator.variables]
    return learner, metrics, weights


@pytest.mark.slow
def test_one_and_two_replicas_train_alike():
    """Two optimizers, two all-reduces and the spectral-norm state in one step: same on 1 and 2 replicas."""
    one, m1, w1 = _train(1, 20)
    two, m2, w2 = _train(2, 20)
    assert one.step == two.step == 20
    for a, b in zip(w1, w2):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(m1["discriminator_loss"], m2["discriminator_loss"], rtol=1e-3)
    _, _, w0 = _train(1, 1)
    assert max(np.abs(a - b).max() for a, b in zip(w1, w0)) > 1e-3  # 20 steps did move the weights


@pytest.mark.slow
def test_training_brings_samples_close_to_held_out_digits_and_logs_grids(tmp_path):
    config = GANConfig(num_steps=3000, sample_period=1000, checkpoint_period=3000, log_period=500)
    summary = train.train(config, num_replicas=2, logdir=str(tmp_path), progress=False)
    assert summary["step"] == 3000
    # Untrained samples are far from the digits; trained ones much closer (MMD, RBF kernel).
    assert summary["mmd"] < 0.3 * summary["initial_mmd"], summary
    evals = loggers.read_jsonl(os.path.join(tmp_path, loggers.JSONL_NAME), "evaluator")
    assert [r["step"] for r in evals] == [0, 1000, 2000, 3000]
    grids = [(e.step, tf.image.decode_png(tf.make_ndarray(v.tensor)[2]).numpy())
             for p in glob.glob(str(tmp_path / "tb" / "evaluator" / "events.*"))
             for e in tf.compat.v1.train.summary_iterator(p) for v in e.summary.value if v.tag == "samples"]
    assert [s for s, _ in grids] == [0, 1000, 2000, 3000]
    first, last = grids[0][1], grids[-1][1]
    assert last.shape == (4 * 37, 4 * 37, 1)  # 4 x 4 digits of 8 px + 1 px lines, x4
    assert last.std() > 20 and np.abs(last.astype(int) - first.astype(int)).mean() > 5


@pytest.mark.slow
def test_rlplat_train_gan_writes_sample_grids(tmp_path):
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top

    logdir = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "rlplat.launch.cli", "train", "gan", "--num-steps", "200",
                             "--sample-period", "100", "--log-period", "100", "--logdir", str(logdir),
                             "--no-progress"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "MMD to held-out digits" in result.stdout and "tensorboard --logdir" in result.stdout
    steps = sorted(e.step for p in glob.glob(str(logdir / "tb" / "evaluator" / "events.*"))
                   for e in tf.compat.v1.train.summary_iterator(p)
                   for v in e.summary.value if v.tag == "samples")
    assert steps == [0, 100, 200]
    assert any(n.startswith("ckpt-200") for n in os.listdir(logdir / "checkpoints"))
