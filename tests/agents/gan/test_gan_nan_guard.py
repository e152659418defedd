"""The GAN learner's NaN guard: a non-finite update is never applied, nor any after it in the call.

NaN digits at one step make the discriminator's loss NaN: that step and the
rest of the call leave both networks, both optimizers (slots, ``iterations``)
and the step exactly as a learner that stopped the step before. A generator
whose loss alone turns non-finite (the discriminator's update of that step
already applied, as its loss needs it) keeps its weights of the step before.
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


BAD_STEP = 3  # 1-based: the third step of a 4-step call
BATCH = 32


def _config():
    return GANConfig(global_batch_size=BATCH, generator_sizes=(32, 32), discriminator_sizes=(32, 32))


def _batches(repl, poison):
    make = data.make_input_fn(BATCH, 0)
    n = repl.num_replicas

    def input_fn(ctx):
        bad = (BAD_STEP - 1) * n + n - 1  # the last replica's part of step BAD_STEP

        def inject(i, batch):
            x, y = batch
            return tf.where(tf.equal(i, bad) & poison, tf.fill(tf.shape(x), np.nan), x), y

        return make(ctx).enumerate().map(inject)

    return repl.distribute(input_fn)


def _state(learner, repl):
    """``{checkpointable: [array per variable and replica copy]}``, in checkpoint order (Keras' variable
    names differ between two learners of one process)."""
    out = {}
    for name, obj in learner.checkpointables().items():
        ckpt = tf.train.Checkpoint(obj=obj)  # the view holds it weakly
        out[name] = [np.array(c.numpy()) for v in tf.train.TrackableView(ckpt).descendants()
                     if isinstance(v, tf.Variable)
                     for c in repl.strategy.experimental_local_results(v)]
    return out


def _assert_same(want, got, names=None):
    assert want.keys() == got.keys()
    for name in names if names is not None else want:
        assert len(got[name]) == len(want[name]) > 0, name
        for a, b in zip(got[name], want[name]):
            np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("num_replicas", [1, 2])
def test_nan_digits_mid_call_keep_both_networks_and_optimizers_of_the_step_before(num_replicas):
    repl = replication.make_replicator(num_replicas)
    reference, learner = learning.GANLearner(_config(), repl), learning.GANLearner(_config(), repl)  # seeded
    reference.train(_batches(repl, poison=True), BAD_STEP - 1)
    with pytest.raises(FloatingPointError) as error:
        learner.train(_batches(repl, poison=True), 4)
    message = str(error.value)
    assert message.startswith(f"GAN: non-finite discriminator loss and discriminator gradient at learner step "
                              f"{BAD_STEP}; neither update was applied"), message
    assert "\n" not in message and "lower the learning rates" in message
    assert learner.step == BAD_STEP - 1
    _assert_same(_state(reference, repl), _state(learner, repl))


class _GeneratorFailsAt(learning.GANLearner):
    """A learner whose generator loss turns NaN at ``BAD_STEP`` (its discriminator's stays finite)."""

    def _generator_loss_and_grads(self, noise, real_scores, fake_scores):
        loss, grads = super()._generator_loss_and_grads(noise, real_scores, fake_scores)
        poison = tf.where(tf.equal(self.step_counter.read_value(), BAD_STEP - 1), np.nan, 1.0)
        return loss * poison, [g * poison for g in grads]


@pytest.mark.slow
def test_a_non_finite_generator_update_is_skipped_after_the_discriminator_update_it_followed():
    repl = replication.make_replicator(1)
    reference, learner = learning.GANLearner(_config(), repl), _GeneratorFailsAt(_config(), repl)
    reference.train(_batches(repl, poison=False), BAD_STEP - 1)
    with pytest.raises(FloatingPointError, match=rf"^GAN: non-finite generator loss and generator gradient at "
                                                 rf"learner step {BAD_STEP}; the generator's update was not applied"):
        learner.train(_batches(repl, poison=False), 4)
    assert learner.step == BAD_STEP - 1
    want, got = _state(reference, repl), _state(learner, repl)
    _assert_same(want, got, ["generator", "generator_optimizer", "step"])
    # The discriminator took its update of step BAD_STEP (one more Adam iteration), and no other.
    assert learner.discriminator_optimizer.iterations.numpy() == BAD_STEP
    assert any(not np.array_equal(a, b) for a, b in zip(got["discriminator"], want["discriminator"]))
    assert all(np.isfinite(v).all() for values in got.values() for v in values)
