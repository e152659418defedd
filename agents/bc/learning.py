"""The BC learner: MSE from the policy's actions to the teacher's, written for one replica.

As ``rlplat.replication.replicator`` says: each replica's MEAN loss, loss and gradients averaged by
``all_reduce(..., "mean")``, applied once (NaN-guarded): N replicas at global batch B train as one at B.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
import tensorflow as tf

from rlplat_agents.bc.config import BCConfig
from rlplat_agents.d4pg import networks
from rlplat import replication
from rlplat.replay_fed_learner import ReplayFedLearner
from rlplat.utils.optimizers import apply_gradients_cross_replica


class BCLearner(ReplayFedLearner):
    """Fits ``policy(observation)`` to the teacher's action, from per-replica batches of the data set."""

    STEP_AUTOGRAPH = False  # no Python control flow on tensors in the step
    NAME = "BC"
    FIXES = {"*": "lower --learning-rate or check the data set"}

    def __init__(self, config: BCConfig, environment_spec: Any, replicator: Any, iterator: Any):
        super().__init__(replicator, iterator, steps_per_call=config.steps_per_call, replay_address=None,
                         replay_table=None, rate_limiter_timeout_ms=0, step_timeout_s=0.0)
        with replicator.scope():
            self.policy = networks.make_policy_network(int(np.prod(environment_spec.actions.shape)),
                                                       config.layer_sizes)
            self.policy(tf.zeros((1, int(np.prod(environment_spec.observations.shape)))))  # build now
            self.optimizer = tf.keras.optimizers.Adam(config.learning_rate)
            self.optimizer.build(self.policy.trainable_variables)  # slots exist before any restore
            self._make_step_counter(("loss", "gradient"))
        self._serve(self.policy.variables)

    def _step_fn(self, batch) -> Dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:  # this replica's mean loss:
            loss = tf.reduce_mean(tf.square(self.policy(batch["observation"]) - batch["action"]))
        grads, mean_loss = replication.all_reduce([tape.gradient(loss, self.policy.trainable_variables), loss], "mean")
        self._guard.apply_if_finite([mean_loss, tf.linalg.global_norm(grads)], self.step_counter,
                                    self._apply, grads)
        return {"loss": loss}

    def _apply(self, strategy, grads) -> None:
        variables = self.policy.trainable_variables
        apply_gradients_cross_replica(self.optimizer, strategy, zip(grads, variables))
        with tf.control_dependencies([v.read_value() for v in variables]):  # version v: v steps applied
            self.step_counter.assign_add(1)

    def step(self) -> Dict[str, float]:  # steps_per_call steps: the last one's loss, learner_steps
        return self._run_steps(self._steps_per_call)

    def checkpointables(self) -> Dict[str, Any]:
        return {"policy": self.policy, "optimizer": self.optimizer, "learner_steps": self.step_counter}
