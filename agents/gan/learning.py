"""``GANLearner``: one ``step_fn`` updates the discriminator, then the generator, on every replica.

The two updates follow the platform's convention (``rlplat.replication``):
each replica takes the mean hinge loss over its own images, gradients are
averaged over replicas with one all-reduce per model, and each optimizer
applies them with ``skip_gradients_aggregation=True``. The generator's
noise for a step is drawn for the whole global batch from a stateless seed
(the config's seed and the step) and each replica takes its own rows, as the
input pipeline gives each replica its rows of the global batch of digits:
one replica or several train alike.

NaN guard (``rlplat.utils.nonfinite``), as the other learners: each update
is applied only when its replica-mean loss and its gradient norm are finite
and no earlier update failed; after a failure every later update of the
call is skipped and ``train`` raises one line. The two updates share one
guard and check in turn, because the generator's loss needs the
discriminator's new weights: when only the generator's values fail, the
discriminator's update of that step stays applied. A skipped discriminator
update also puts back the spectral-norm estimates its forward pass moved.
Nothing non-finite ever reaches the weights or the optimizers.

Precision (``rlplat.precision``): the learner resolves ``config.precision``
and builds both networks for it (``networks``: the wide products in
bfloat16 under bf16); the losses, spectral norm's sigma and Adam stay float32.
"""

from __future__ import annotations

from typing import Dict, Iterator

import numpy as np
import tensorflow as tf

from rlplat_agents.gan import networks
from rlplat_agents.gan.config import GANConfig
from rlplat import precision as precision_lib
from rlplat import replication
from rlplat.utils import nonfinite
from rlplat.utils.optimizers import apply_gradients_cross_replica

_WATCHED = ("discriminator loss", "discriminator gradient", "generator loss", "generator gradient")


def hinge_losses(real_scores: tf.Tensor, fake_scores: tf.Tensor, generated_scores: tf.Tensor):
    """(discriminator loss, generator loss), each a mean over this replica's images.

    Discriminator: mean(relu(1 - D(real))) + mean(relu(1 + D(fake))).
    Generator: -mean(D(G(z))), with the discriminator's new weights.
    """
    d_loss = tf.reduce_mean(tf.nn.relu(1.0 - real_scores)) + tf.reduce_mean(tf.nn.relu(1.0 + fake_scores))
    return d_loss, -tf.reduce_mean(generated_scores)


class GANLearner:
    """Generator, discriminator, two Adam optimizers and the step counter, under one Replicator.

    ``precision`` is what ``config.precision`` resolved to here (``rlplat.precision.Resolved``).
    """

    def __init__(self, config: GANConfig, replicator: replication.Replicator):
        config.check_replicas(replicator.num_replicas)
        self._config = config
        self._repl = replicator
        self.precision = precision_lib.resolve(config.precision, bf16_parity=precision_lib.bf16_parity(config),
                                               gpu=replicator.uses_gpus)
        arithmetic = self.precision.precision
        with replicator.scope():
            self.generator = networks.make_generator(config.noise_dim, config.generator_sizes, config.seed,
                                                     arithmetic)
            self.discriminator = networks.make_discriminator(config.discriminator_sizes, config.spectral_norm,
                                                             config.seed + 1000, arithmetic)
            self.generator_optimizer = tf.keras.optimizers.Adam(config.generator_learning_rate, beta_1=0.5)
            self.discriminator_optimizer = tf.keras.optimizers.Adam(config.discriminator_learning_rate,
                                                                    beta_1=0.5)
            # Slots exist before any restore (no deferred restoration).
            self.generator_optimizer.build(self.generator.trainable_variables)
            self.discriminator_optimizer.build(self.discriminator.trainable_variables)
            self.step_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="step",
                                            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self._guard = nonfinite.NonFiniteGuard(_WATCHED)

    @property
    def step(self) -> int:
        return int(self.step_counter.numpy())

    def checkpointables(self) -> Dict[str, tf.Module]:
        """Both networks, both optimizers (slots and ``iterations``) and the step."""
        return {"generator": self.generator, "discriminator": self.discriminator,
                "generator_optimizer": self.generator_optimizer,
                "discriminator_optimizer": self.discriminator_optimizer, "step": self.step_counter}

    def _noise(self, per_replica: int) -> tf.Tensor:
        """This replica's rows of the step's global noise batch."""
        seed = tf.stack([tf.constant(self._config.seed, tf.int64), self.step_counter.read_value()])
        noise = tf.random.stateless_normal([self._config.global_batch_size, self._config.noise_dim],
                                           tf.cast(seed, tf.int64))
        start = tf.cast(replication.replica_id(), tf.int32) * per_replica
        return noise[start:start + per_replica]

    def step_fn(self, batch) -> Dict[str, tf.Tensor]:
        """One discriminator update, then one generator update, on this replica's digits."""
        real = batch[0] * 2.0 - 1.0  # digits come in [0, 1]; the generator's tanh gives [-1, 1]
        noise = self._noise(tf.shape(real)[0])
        # The discriminator's training calls move spectral norm's estimates before its loss is known.
        estimates = self.discriminator.non_trainable_variables
        before = [v.read_value() for v in estimates]
        d_loss, d_grads, real_scores, fake_scores = self._discriminator_loss_and_grads(real, noise)
        d_grads, mean_d_loss = replication.all_reduce([d_grads, d_loss], "mean")
        unchecked = tf.constant(0.0)  # the other update's values: checked in its own turn
        applied = self._guard.apply_if_finite([mean_d_loss, tf.linalg.global_norm(d_grads), unchecked, unchecked],
                                              self.step_counter, self._apply_discriminator, d_grads)
        for variable, value in zip(estimates, before):
            variable.assign(tf.where(applied, variable.read_value(), value))
        g_loss, g_grads = self._generator_loss_and_grads(noise, real_scores, fake_scores)
        g_grads, mean_g_loss = replication.all_reduce([g_grads, g_loss], "mean")
        self._guard.apply_if_finite([unchecked, unchecked, mean_g_loss, tf.linalg.global_norm(g_grads)],
                                    self.step_counter, self._apply_generator, g_grads)
        return {"discriminator_loss": d_loss, "generator_loss": g_loss,
                "real_score": tf.reduce_mean(real_scores), "fake_score": tf.reduce_mean(fake_scores)}

    def _apply_discriminator(self, strategy, grads) -> None:
        """The discriminator's update, in cross-replica context; the NaN guard runs it only when finite."""
        apply_gradients_cross_replica(self.discriminator_optimizer, strategy,
                                      zip(grads, self.discriminator.trainable_variables))

    def _apply_generator(self, strategy, grads) -> None:
        """The generator's update and the step's count, in cross-replica context (guarded, as above)."""
        apply_gradients_cross_replica(self.generator_optimizer, strategy,
                                      zip(grads, self.generator.trainable_variables))
        self.step_counter.assign_add(1)

    def _discriminator_loss_and_grads(self, real: tf.Tensor, noise: tf.Tensor):
        """This replica's discriminator loss and gradients (not reduced), real and fake scores; a training call
        (spectral norm keeps one more power iteration)."""
        with tf.GradientTape() as tape:
            fake = self.generator(noise, training=True)
            real_scores = self.discriminator(real, training=True)
            fake_scores = self.discriminator(fake, training=True)
            d_loss, _ = hinge_losses(real_scores, fake_scores, fake_scores)
        return d_loss, tape.gradient(d_loss, self.discriminator.trainable_variables), real_scores, fake_scores

    def _generator_loss_and_grads(self, noise: tf.Tensor, real_scores: tf.Tensor, fake_scores: tf.Tensor):
        """This replica's generator loss and gradients (not reduced), through the discriminator as it is now."""
        with tf.GradientTape() as tape:
            generated_scores = self.discriminator(self.generator(noise, training=True), training=False)
            _, g_loss = hinge_losses(real_scores, fake_scores, generated_scores)
        return g_loss, tape.gradient(g_loss, self.generator.trainable_variables)

    def train(self, iterator: Iterator, num_steps: int) -> Dict[str, float]:
        """``num_steps`` steps in one ``tf.function`` call; the last step's metrics over replicas.

        Raises:
          FloatingPointError: an update's loss or gradient was NaN/Inf; it and
            the rest of the call were skipped (see the module doc).
        """
        metrics = self._repl.run_steps(self.step_fn, iterator, num_steps)
        self._raise_if_tripped()
        return {k: float(v) for k, v in metrics.items()}

    def _raise_if_tripped(self) -> None:
        if not self._guard.tripped:
            return
        step, mask = int(self._guard.failed_step.numpy()), int(self._guard.failed_mask.numpy())
        bad = [name for i, name in enumerate(_WATCHED) if mask >> i & 1]
        kept = ("neither update was applied" if mask & 0b11 else
                "the generator's update was not applied (the discriminator's, which its loss follows, was)")
        raise FloatingPointError(f"GAN: non-finite {' and '.join(bad)} at learner step {step}; {kept}, and no "
                                 "later one; lower the learning rates or check the data")

    def sample(self, num: int, seed: int = 12345) -> np.ndarray:
        """``num`` generated digits ``[num, 8, 8]`` in [0, 1], from fixed noise (comparable over time)."""
        noise = tf.random.stateless_normal([num, self._config.noise_dim], [seed, 0])
        images = self.generator(noise, training=False).numpy()
        return ((images + 1.0) / 2.0).reshape(num, 8, 8)


def mmd(x: np.ndarray, y: np.ndarray, bandwidth: float) -> float:
    """Squared maximum mean discrepancy with an RBF kernel (biased estimate), in NumPy.

    0 when the two samples come from the same distribution (in the limit);
    the evaluation's measure of how close generated digits are to held-out ones.
    """
    def kernel(a, b):
        d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
        return np.exp(-np.maximum(d, 0.0) / (2 * bandwidth ** 2))

    x, y = x.reshape(len(x), -1).astype(np.float64), y.reshape(len(y), -1).astype(np.float64)
    return float(kernel(x, x).mean() + kernel(y, y).mean() - 2 * kernel(x, y).mean())


def sample_grid(images: np.ndarray, columns: int = 4, scale: int = 4) -> np.ndarray:
    """``[n, 8, 8]`` images in [0, 1] as one uint8 grid ``[H, W, 1]``, each pixel ``scale`` x ``scale``."""
    n = len(images)
    rows = -(-n // columns)
    grid = np.ones((rows * 9 + 1, columns * 9 + 1), np.float32)  # one-pixel white lines between digits
    for i, image in enumerate(images):
        r, c = divmod(i, columns)
        grid[1 + r * 9:1 + r * 9 + 8, 1 + c * 9:1 + c * 9 + 8] = image
    grid = np.kron(grid, np.ones((scale, scale), np.float32))
    return (np.clip(grid, 0.0, 1.0) * 255).astype(np.uint8)[..., None]
