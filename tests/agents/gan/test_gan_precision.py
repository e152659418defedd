"""The GAN learner under ``precision="bf16"``: its step matches fp32's (``precision_parity``), ``auto`` stays
fp32, the NaN guard, checkpoints across precisions.

The networks are the default widths (noise 16 -> 128 -> 128 -> 64 pixels;
64 -> 128 -> 128 -> 1 score), on one batch of 64 digits. The generator's loss
is a mean of scores near zero at initialisation, so the losses' bar has an
absolute part too (``LOSS_ATOL``, 1e-3 of scores whose hinge margin is 1).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
import tensorflow as tf

from rlplat_agents.gan import learning
from rlplat_agents.gan.config import GANConfig
from rlplat_agents.supervised import data
from rlplat import replication
from rlplat.utils import checkpointing

from checkpoint_state import checkpointed_state
import precision_parity as parity

LR, STEPS, BATCH, LOSS_ATOL = 2e-4, 4, 64, 1e-3
# /proc/cpuinfo of a CPU with bfloat16 instructions: there ``auto`` would pick bf16 for an agent with parity.


def _learner(precision_name, **changes):
    config = GANConfig(global_batch_size=BATCH, generator_learning_rate=LR, discriminator_learning_rate=LR,
                       precision=precision_name, **changes)
    return learning.GANLearner(config, replication.make_replicator(1))


def _networks_variables(learner):
    return learner.generator.variables + learner.discriminator.variables  # spectral norm's u included


def _state(learner):
    """Every checkpointed variable (weights, u, Adam's slots, step), in checkpoint order (layer names differ)."""
    return list(checkpointed_state(learner, learner._repl).values())  # pylint: disable=protected-access


@pytest.mark.parametrize("spectral_norm", [True, False])
def test_bf16_step_matches_fp32_on_a_fixed_batch(spectral_norm):
    fp32, bf16 = _learner("fp32", spectral_norm=spectral_norm), _learner("bf16", spectral_norm=spectral_norm)
    assert (fp32.precision.precision, bf16.precision.precision) == ("fp32", "bf16")
    for a, b in zip(_networks_variables(fp32), _networks_variables(bf16)):
        b.assign(a.numpy())
    train, _ = data.load_splits(0)
    real = tf.constant(train.x[:BATCH] * 2.0 - 1.0)
    noise = tf.random.stateless_normal([BATCH, fp32._config.noise_dim], [0, 0])  # pylint: disable=protected-access
    # Products of width >= MIN_BF16_WIDTH in bfloat16: the generator's 128x128 and 128x64, the discriminator's
    # 64x128 and 128x128; the noise input's and the score's in float32, as are spectral norm's sigma's (4 a layer).
    generator = parity.matmul_dtypes(tf.function(lambda z: bf16.generator(z, training=False)), noise)
    discriminator = parity.matmul_dtypes(tf.function(lambda x: bf16.discriminator(x, training=False)), real)
    assert generator == {"bfloat16": 2, "float32": 1}, generator
    assert discriminator == {"bfloat16": 2, "float32": 1 + 3 * 4 * spectral_norm}, discriminator
    assert {v.dtype for v in _networks_variables(bf16)} == {tf.float32}
    d32 = fp32._discriminator_loss_and_grads(real, noise)  # pylint: disable=protected-access
    d16 = bf16._discriminator_loss_and_grads(real, noise)  # pylint: disable=protected-access
    assert d16[2].dtype == d16[3].dtype == tf.float32  # the scores
    g32 = fp32._generator_loss_and_grads(noise, d32[2], d32[3])  # pylint: disable=protected-access
    g16 = bf16._generator_loss_and_grads(noise, d16[2], d16[3])  # pylint: disable=protected-access
    parity.assert_losses_match(("discriminator loss", "generator loss"), (d32[0], g32[0]), (d16[0], g16[0]),
                               atol=LOSS_ATOL)
    parity.assert_gradients_match("discriminator", d32[1], d16[1])
    parity.assert_gradients_match("generator", g32[1], g16[1])
    stream = data.make_input_fn(BATCH, 0)
    batches = {p: replication.make_replicator(1).distribute(stream) for p in ("fp32", "bf16")}
    names = ("discriminator_loss", "generator_loss")
    for step in range(STEPS):
        m32, m16 = fp32.train(batches["fp32"], 1), bf16.train(batches["bf16"], 1)
        parity.assert_losses_match([f"{n}, step {step + 1}" for n in names], [m32[n] for n in names],
                                   [m16[n] for n in names], atol=LOSS_ATOL)
    assert fp32.step == bf16.step == STEPS
    trainable = [lambda learner: learner.generator.trainable_variables,
                 lambda learner: learner.discriminator.trainable_variables]
    parity.assert_weights_close([v.numpy() for f in trainable for v in f(fp32)],
                                [v.numpy() for f in trainable for v in f(bf16)], LR, STEPS)


def test_auto_stays_fp32_because_no_parity_is_declared():
    parity.assert_auto_stays_fp32_without_parity(GANConfig)


def test_the_nan_guard_stops_a_bf16_step():
    learner = _learner("bf16")
    x = np.full((BATCH, data.NUM_FEATURES), np.nan, np.float32)
    bad = learner._repl.distribute(  # pylint: disable=protected-access
        lambda ctx: tf.data.Dataset.from_tensors((x, np.zeros((BATCH,), np.int32))).repeat())
    before = [v.numpy() for v in _networks_variables(learner)]
    with pytest.raises(FloatingPointError, match=r"^GAN: non-finite discriminator loss and discriminator gradient "
                                                 r"at learner step 1; neither update was applied"):
        learner.train(bad, 1)
    assert learner.step == 0
    for want, got in zip(before, _networks_variables(learner)):
        np.testing.assert_array_equal(got.numpy(), want)


def _checkpointer(learner, directory):
    return checkpointing.Checkpointer(str(directory), **learner.checkpointables())


def test_a_bf16_checkpoint_restores_in_fp32_and_back(tmp_path):
    bf16 = _learner("bf16")
    bf16.train(bf16._repl.distribute(data.make_input_fn(BATCH, 0)), 1)  # pylint: disable=protected-access
    _checkpointer(bf16, tmp_path / "bf16").save(bf16.step)
    fp32 = _learner("fp32")
    assert _checkpointer(fp32, tmp_path / "bf16").restore(1) == 1 and fp32.step == 1
    state16, state32 = _state(bf16), _state(fp32)
    assert len(state16) == len(state32)  # the same variables: no bf16-only state
    for a, b in zip(state16, state32):
        np.testing.assert_array_equal(a, b)
    fp32.train(fp32._repl.distribute(data.make_input_fn(BATCH, 0, start_step=1)), 1)  # pylint: disable=protected-access
    _checkpointer(fp32, tmp_path / "fp32").save(fp32.step)
    back = _learner("bf16")
    assert _checkpointer(back, tmp_path / "fp32").restore(2) == 2
    assert back.step == 2 and int(back.generator_optimizer.iterations) == 2
    for a, b in zip(_state(fp32), _state(back)):
        np.testing.assert_array_equal(a, b)
