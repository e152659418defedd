"""What a learner's checkpoint holds, as NumPy: for tests that compare learner states exactly."""

import numpy as np
import tensorflow as tf


def checkpointed_state(learner, replicator):
    """Every variable of ``learner.checkpointables()``, per replica copy: ``{(name, replica): array}``."""
    ckpt = tf.train.Checkpoint(**learner.checkpointables())
    variables = [v for v in tf.train.TrackableView(ckpt).descendants() if isinstance(v, tf.Variable)]
    return {(v.name, i): np.array(c.numpy())
            for v in variables for i, c in enumerate(replicator.strategy.experimental_local_results(v))}
