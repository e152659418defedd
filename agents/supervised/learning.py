"""The supervised learner: a model, an optimizer and the per-replica step.

The learner owns the step only (the orbit split): ``train.py`` owns the loop,
the logs and the checkpoints. ``step_fn`` is written for ONE replica and
follows the platform's gradient convention (see
``rlplat.replication.replicator``): the per-replica MEAN loss, gradients
averaged with ``all_reduce(grads, "mean")``, and
``apply_gradients(..., skip_gradients_aggregation=True)``.

NaN guard (``rlplat.utils.nonfinite``), as the RL learners: a step whose
loss (replica mean) or gradient norm is NaN/Inf is not applied, nor is any
later one of the call; batch norm's moving statistics, which the forward pass
updates before the loss is known, are put back too. ``train`` then raises
``FloatingPointError`` naming the step; the model is that of the step before.

Precision (``rlplat.precision``): the learner resolves ``config.precision``
and builds the classifier's Dense layers for it (``networks.make_classifier``);
the loss, batch norm, the gradients' reductions and Adam stay float32.
"""

from __future__ import annotations

from typing import Dict, Iterator, Optional

import tensorflow as tf

from rlplat_agents.supervised import data
from rlplat_agents.supervised import networks
from rlplat_agents.supervised.config import SupervisedConfig
from rlplat import precision as precision_lib
from rlplat import replication
from rlplat.utils import nonfinite
from rlplat.utils.optimizers import apply_gradients_cross_replica


class SupervisedLearner:
    """Trains the digits classifier on every replica of a ``Replicator``.

    Attributes:
      model: the Keras classifier (variables mirrored over the replicas).
      optimizer: Adam; its ``iterations`` equals ``step`` after every call.
      step_counter: int64 variable, the number of gradient steps taken.
      precision: what ``config.precision`` resolved to here (``rlplat.precision.Resolved``).
    """

    def __init__(self, config: SupervisedConfig, replicator: replication.Replicator):
        config.check_replicas(replicator.num_replicas)
        self._config = config
        self._repl = replicator
        self.precision = precision_lib.resolve(config.precision, bf16_parity=precision_lib.bf16_parity(config),
                                               gpu=replicator.uses_gpus)
        with replicator.scope():
            self.model = networks.make_classifier(
                config.hidden_sizes, config.synchronized_batch_norm, seed=config.seed,
                precision=self.precision.precision)
            self.optimizer = tf.keras.optimizers.Adam(config.learning_rate)
            # Slots exist before any restore, so a checkpoint loads at once
            # instead of waiting for the first step (deferred restoration).
            self.optimizer.build(self.model.trainable_variables)
            # Incremented inside the step, so it cannot drift from the weights
            # even when Ctrl-C lands between two calls.
            self.step_counter = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self._guard = nonfinite.NonFiniteGuard(("loss", "gradient"))
        self._held_out = None

    # ------------------------------------------------------------------ train
    def step_fn(self, batch) -> Dict[str, tf.Tensor]:
        """One gradient step on this replica's batch ``(x [b, 64], y [b])``."""
        x, y = batch
        # The forward pass moves batch norm's moving statistics (this
        # replica's copies) before the loss is known: keep them to put back.
        statistics = self.model.non_trainable_variables
        before = [v.read_value() for v in statistics]
        loss, logits, grads = self._loss_and_grads(x, y)
        grads, mean_loss = replication.all_reduce([grads, loss], "mean")
        applied = self._guard.apply_if_finite([mean_loss, tf.linalg.global_norm(grads)],
                                              self.step_counter, self._apply, grads)
        for variable, value in zip(statistics, before):
            variable.assign(tf.where(applied, variable.read_value(), value))
        return {"loss": loss, "accuracy": _accuracy(logits, y)}

    def _loss_and_grads(self, x: tf.Tensor, y: tf.Tensor):
        """This replica's mean loss, logits and gradients (not reduced over replicas); moves batch norm's
        moving statistics."""
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            # Per-replica MEAN loss: with equal per-replica batches the mean of
            # these over replicas is the mean over the global batch.
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
                y, logits, from_logits=True))
        return loss, logits, tape.gradient(loss, self.model.trainable_variables)

    def _apply(self, strategy, grads) -> None:
        """The update, in cross-replica context; the NaN guard runs it only when all is finite."""
        apply_gradients_cross_replica(self.optimizer, strategy, zip(grads, self.model.trainable_variables))
        self.step_counter.assign_add(1)

    def train(self, iterator: Iterator, num_steps: int) -> Dict[str, float]:
        """Runs ``num_steps`` steps in one ``tf.function`` call.

        Returns the last step's loss and accuracy, averaged over replicas
        (i.e. over the global batch).

        Raises:
          FloatingPointError: a step's loss or gradient was NaN/Inf; it and
            the rest of the call were skipped (the model is the step before's).
        """
        metrics = self._repl.run_steps(self.step_fn, iterator, num_steps)
        self._guard.raise_if_tripped("supervised", {"*": "lower --learning-rate or check the data"})
        return {k: float(v) for k, v in metrics.items()}

    # ------------------------------------------------------------------- eval
    def evaluate(self, split: Optional[data.Split] = None) -> Dict[str, float]:
        """Loss and accuracy of the model in inference mode on ``split``.

        ``split`` defaults to the held-out set of the config's seed. The whole
        split goes through the model at once (it is a few hundred examples).
        """
        if split is None:
            if self._held_out is None:
                _, self._held_out = data.load_splits(self._config.seed, self._config.held_out_fraction)
            split = self._held_out
        loss, accuracy = self._evaluate(tf.constant(split.x), tf.constant(split.y))
        return {"loss": float(loss), "accuracy": float(accuracy)}

    @tf.function
    def _evaluate(self, x: tf.Tensor, y: tf.Tensor):
        # Inference reads mirrored weights and the replica-averaged moving
        # statistics in cross-replica context; no collectives are needed.
        logits = self.model(x, training=False)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
            y, logits, from_logits=True))
        return loss, _accuracy(logits, y)

    # ------------------------------------------------------------------ state
    @property
    def step(self) -> int:
        """Gradient steps taken so far (restored from a checkpoint on resume)."""
        return int(self.step_counter.numpy())

    def checkpointables(self) -> Dict[str, tf.Module]:
        """What a checkpoint must hold to resume exactly: weights, Adam state, step."""
        return {"model": self.model, "optimizer": self.optimizer, "step": self.step_counter}


def _accuracy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    predictions = tf.argmax(logits, axis=-1, output_type=labels.dtype)
    return tf.reduce_mean(tf.cast(tf.equal(predictions, labels), tf.float32))
