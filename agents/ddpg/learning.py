"""DDPG's networks and learner: scalar critic, n-step TD target, Polyak targets, the platform's gradient
convention (per-replica mean losses, mean all-reduce, skip_gradients_aggregation: ``_apply_mean_gradients``)."""

from typing import Any, Dict

import numpy as np
import tensorflow as tf

from rlplat.losses import dpg
from rlplat.utils.bf16_dense import dense_class
from rlplat.replay_fed_learner import ReplayFedLearner
from rlplat.utils.optimizers import FusedAdam


def make_networks(config, environment_spec, precision: str = "fp32"):
    """Built MLPs: policy obs [B, O] -> tanh actions [B, A]; critic [obs [B, O], action [B, A]] -> Q [B].

    The first layer is Dense+LayerNorm+tanh (Acme's layer-norm MLP; ReLU after it): on cartpole:swingup plain
    ReLU MLPs, blind to the observations' mixed scales, saturated the policy and reached ~260 in 30k steps.
    Under ``precision`` "bf16" the hidden layers multiply in bfloat16; the (tiny) output layers stay float32.
    """
    obs, act = (int(np.prod(s.shape)) for s in (environment_spec.observations, environment_spec.actions))
    layers = tf.keras.layers

    def mlp(sizes, out, activation=None, first=(), last=()):  # The output layer starts near 0, as in the paper.
        small = tf.keras.initializers.RandomUniform(-3e-3, 3e-3)
        return tf.keras.Sequential([*first, dense_class(precision)(sizes[0]), layers.LayerNormalization(epsilon=1e-5),
                                    layers.Activation("tanh"), *(dense_class(precision)(s, "relu") for s in sizes[1:]),
                                    layers.Dense(out, activation, kernel_initializer=small), *last])

    policy = mlp(config.policy_layer_sizes, act, "tanh")
    critic = mlp(config.critic_layer_sizes, 1, first=[layers.Concatenate()], last=[layers.Reshape(())])
    policy(tf.zeros((1, obs)))
    critic([tf.zeros((1, obs)), tf.zeros((1, act))])
    return policy, critic


class DDPGLearner(ReplayFedLearner):
    """``policy``, ``critic``, ``target_*`` copies, Adam optimizers; ``kwargs`` go to ``ReplayFedLearner``."""

    STEP_AUTOGRAPH = False  # no Python control flow on tensors in the step
    NAME = "DDPG"
    GUARDED = ("critic loss", "policy loss", "critic gradient", "policy gradient")  # NaN guard: in this order
    FIXES = {**{name: f"lower --{name.split()[0]}-learning-rate" for name in GUARDED}, "*": "check the rewards"}

    def __init__(self, config, environment_spec: Any, replicator, iterator, **kwargs):
        super().__init__(replicator, iterator, **kwargs)
        replicator.per_replica_batch_size(config.global_batch_size)  # Divisible, or a clear error.
        self._config = config
        precision = self._resolve_precision(config).precision  # "auto" -> fp32 or bf16, here
        with replicator.scope():
            self.policy, self.critic = make_networks(config, environment_spec, precision)
            self.target_policy, self.target_critic = make_networks(config, environment_spec, precision)
            self.policy_optimizer = FusedAdam(config.policy_learning_rate)
            self.critic_optimizer = FusedAdam(config.critic_learning_rate)
            self.policy_optimizer.build(self.policy.trainable_variables)  # Slots exist before a restore.
            self.critic_optimizer.build(self.critic.trainable_variables)
            self._make_step_counter(self.GUARDED)
        self._update_targets(1.0)  # Targets start equal to the online networks.
        self._serve(self.policy.variables)

    def _losses_and_grads(self, batch):
        """This replica's mean losses and their gradients (no collectives)."""
        o_tm1, a_tm1, r_t, d_t, o_t = batch
        # n-step TD target from the target networks, off the tape. d_t is already gamma^n times
        # the env's discounts (the adder's; 0 after a terminal), so no gamma here.
        target = r_t + d_t * self.target_critic([o_t, self.target_policy(o_t)])
        with tf.GradientTape(persistent=True) as tape:
            critic_loss = 0.5 * tf.reduce_mean(tf.square(target - self.critic([o_tm1, a_tm1])))
            actions = self.policy(o_tm1)  # DPG at the replayed states, as in the paper.
            q = self.critic([o_tm1, actions])
            with tape.stop_recording():
                dqda = tape.gradient(q, actions)  # Q_i depends on action i only: per-example dQ/da.
            policy_loss = tf.reduce_mean(dpg.dpg_dqda_loss(dqda, actions))  # Its gradient is -mean Q's.
        critic_grads = tape.gradient(critic_loss, self.critic.trainable_variables)
        policy_grads = tape.gradient(policy_loss, self.policy.trainable_variables)
        return critic_loss, policy_loss, tf.reduce_mean(q), critic_grads, policy_grads

    def _step_fn(self, batch) -> Dict[str, tf.Tensor]:
        critic_loss, policy_loss, mean_q, critic_grads, policy_grads = self._losses_and_grads(tuple(batch))
        # Soft (Polyak) targets after each update, as in the paper, not hard copies every K steps: nothing to cut
        # steps_per_call at, smooth targets. They read the online weights after the optimizers (same resource).
        losses, norms = self._apply_mean_gradients(
            [critic_loss, policy_loss], [(self.critic_optimizer, self.critic.trainable_variables, critic_grads),
                                         (self.policy_optimizer, self.policy.trainable_variables, policy_grads)],
            self._config.max_gradient_norm, after_apply=lambda: self._update_targets(self._config.tau))
        return {"critic_loss": losses[0], "policy_loss": losses[1], "mean_q": mean_q, "critic_grad_norm": norms[0]}

    def _update_targets(self, tau: float) -> None:
        for online, target in ((self.policy, self.target_policy), (self.critic, self.target_critic)):
            for src, dst in zip(online.variables, target.variables):
                dst.assign(src if tau == 1.0 else dst + tau * (src - dst))

    def checkpointables(self) -> Dict[str, Any]:
        return {"policy": self.policy, "critic": self.critic, "target_policy": self.target_policy,
                "target_critic": self.target_critic, "policy_optimizer": self.policy_optimizer,
                "critic_optimizer": self.critic_optimizer, "learner_steps": self.step_counter}
