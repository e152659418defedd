"""The D4PG learner: distributional critic + deterministic policy, replicated.

The step (``_step_fn``) is written for ONE replica and follows the platform's
gradient convention (``rlplat.replication.replicator``): per-replica MEAN
losses, gradients averaged with ``all_reduce(grads, "mean")`` and applied with
``skip_gradients_aggregation=True``; clipping (by global norm, critic and policy
separately) happens AFTER the all-reduce, so N replicas at global batch B
train exactly like one device at B.

Speed (a 2-core CPU box is learner-bound): several steps run per
``tf.function`` call (``steps_per_call``); Adam's update is TF's fused kernel
(``FusedAdam``); the loss/gradient maths can be one XLA cluster
(``jit_compile``, off by default: slower than oneDNN on this CPU); and target
networks are copied between calls, in cross-replica context, so the step
itself has no branch and no extra synchronisation. Calls are cut at
target-update boundaries, so the copy happens at exactly the same learner
steps as a per-step ``if step % period``.

NaN guard (``rlplat.utils.nonfinite``): after the all-reduce, every step
checks that both losses (replica means) and both gradient norms are finite,
and applies the update and advances the step counter only then. The first
non-finite step is recorded and every later step of the call is skipped, so
the weights stay exactly those of the last finite step (never poisoned, so
checkpoints stay finite); ``step()`` then raises ``FloatingPointError``
naming that step and the loss or gradient.

Replay watchdog: sampling from a Reverb server that died hangs forever inside
the C++ sampler, ignoring every timeout. When a replay address is known, each
call runs on a helper thread; if it has not returned after ``step_timeout_s``
the server is probed and, if it is gone, ``ReplayTimeoutError`` is raised (the
hung helper thread is a daemon and is abandoned: the learner is finished).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import tensorflow as tf

from rlplat_agents.d4pg import networks
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat import replication
from rlplat.losses import distributional
from rlplat.losses import dpg
from rlplat.replay import datasets as replay_datasets
from rlplat.replay_fed_learner import ReplayFedLearner
from rlplat.utils.optimizers import FusedAdam, apply_gradients_cross_replica

# What the NaN guard watches (in this order) and what to change for each.
_GUARDED = ("critic loss", "policy loss", "critic gradient", "policy gradient")
_FIXES = {"critic loss": "lower --critic-learning-rate", "critic gradient": "lower --critic-learning-rate",
          "policy loss": "lower --policy-learning-rate", "policy gradient": "lower --policy-learning-rate",
          "*": "check the rewards for NaN/Inf"}


class D4PGLearner(ReplayFedLearner):
    """Trains D4PG networks on batches of n-step ``Transition``s.

    Attributes:
      policy, critic: online networks (variables mirrored over replicas).
      target_policy, target_critic: hard-updated copies of them.
      policy_optimizer, critic_optimizer: Keras 2 Adam optimizers.
      step_counter: int64 variable, learner steps taken (checkpointed).
    """

    STEP_AUTOGRAPH = False  # no Python control flow on tensors in the step
    NAME = "D4PG"
    FIXES = _FIXES

    def __init__(self,
                 config: D4PGConfig,
                 environment_spec: Any,
                 replicator: replication.Replicator,
                 iterator: Iterator,
                 *,
                 steps_per_call: int = 8,
                 jit_compile: bool = False,
                 replay_address: Optional[str] = None,
                 replay_table: Optional[str] = None,
                 rate_limiter_timeout_ms: int = replay_datasets.DEFAULT_RATE_LIMITER_TIMEOUT_MS,
                 step_timeout_s: float = 60.0):
        """Creates networks and optimizers under ``replicator.scope()``.

        Args:
          config: the agent's hyperparameters.
          environment_spec: an ``EnvironmentSpec`` (flat observation and action).
          replicator: where the step runs.
          iterator: per-replica batches of ``Transition``, as returned by
            ``replicator.distribute(...)`` (a Reverb ``input_fn``, or an
            in-memory ``tf.data.Dataset`` of GLOBAL batches for benchmarks and
            tests). It is consumed inside a ``tf.function``, so it must be a
            TF iterator, not a Python generator.
          steps_per_call: learner steps per ``step()`` call (one tf.function
            call); amortises ~1 ms of Python dispatch per call.
          jit_compile: compile the loss/gradient maths with XLA (measured
            slower on CPU; worth trying on GPU).
          replay_address, replay_table: enable the dead-server watchdog and the
            "replay ran dry" translation; None for in-memory iterators.
          rate_limiter_timeout_ms: the dataset's rate-limiter timeout, for the
            error message when sampling runs dry.
          step_timeout_s: how long a call may run before the server is probed.
        """
        super().__init__(replicator, iterator, steps_per_call=steps_per_call, replay_address=replay_address,
                         replay_table=replay_table, rate_limiter_timeout_ms=rate_limiter_timeout_ms,
                         step_timeout_s=step_timeout_s)
        replicator.per_replica_batch_size(config.global_batch_size)  # Divisible, or a clear error.
        self._config = config
        precision = self._resolve_precision(config).precision  # bf16: products only (README, "Precision")

        with replicator.scope():
            online, target = (networks.make_networks(environment_spec, config, precision) for _ in ("online", "target"))
            self.policy, self.critic = online["policy"], online["critic"]
            self.target_policy, self.target_critic = target["policy"], target["critic"]
            self.policy_optimizer = FusedAdam(config.policy_learning_rate)
            self.critic_optimizer = FusedAdam(config.critic_learning_rate)
            # Slots exist before any restore, so a checkpoint loads at once.
            self.policy_optimizer.build(self.policy.trainable_variables)
            self.critic_optimizer.build(self.critic.trainable_variables)
            # Incremented inside the step so it can never drift from the weights.
            self._make_step_counter(_GUARDED)
        self._atoms = self.critic.atoms
        self._copy_targets()  # Targets start equal to the online networks (step 0).

        self._grads_fn = tf.function(self._losses_and_grads, jit_compile=jit_compile, autograph=False)
        self._copy_fn = tf.function(self._copy_targets)
        self._serve(self.policy.variables)

    # ------------------------------------------------------------------- step
    def _losses_and_grads(self, batch):
        """Per-replica losses and gradients (no collectives: XLA-compilable)."""
        o_tm1, a_tm1, r_t, d_t, o_t = batch
        # The target distribution needs no gradients: compute it off the tape.
        target_logits_t = self.target_critic((o_t, self.target_policy(o_t)))
        policy_vars = self.policy.trainable_variables
        critic_vars = self.critic.trainable_variables
        clip_norm = self._config.dqda_clip_norm or None
        with tf.GradientTape(persistent=True) as tape:
            logits_tm1 = self.critic((o_tm1, a_tm1))
            # d_t already holds gamma^n * prod(env discounts): no extra gamma.
            critic_loss = tf.reduce_mean(distributional.categorical_td_loss(
                logits_tm1, r_t, d_t, target_logits_t, self._atoms))
            # DPG on the bootstrap observations, as Acme's D4PG does; the
            # gradient is taken w.r.t. the policy variables only below.
            dpg_actions = self.policy(o_t)
            dpg_q = distributional.expected_q(self.critic((o_t, dpg_actions)), self._atoms)
            with tape.stop_recording():
                # Each example's Q depends on its own action only, so the
                # gradient of the batch's Q values is the per-example dQ/da.
                dqda = tape.gradient(dpg_q, dpg_actions)
            policy_loss = tf.reduce_mean(dpg.dpg_dqda_loss(dqda, dpg_actions, clip_norm))
        critic_grads = tape.gradient(critic_loss, critic_vars)
        policy_grads = tape.gradient(policy_loss, policy_vars)
        return critic_loss, policy_loss, tf.reduce_mean(dpg_q), critic_grads, policy_grads

    def _step_fn(self, batch) -> Dict[str, tf.Tensor]:
        """One learner step on this replica's batch (see module docstring)."""
        critic_loss, policy_loss, mean_q, critic_grads, policy_grads = self._grads_fn(tuple(batch))
        # One all-reduce call for both gradient lists and the two losses (for
        # the NaN guard: a non-finite loss on any replica makes the mean so).
        critic_grads, policy_grads, mean_losses = replication.all_reduce(
            [list(critic_grads), list(policy_grads), tf.stack([critic_loss, policy_loss])], "mean")
        critic_norm = tf.linalg.global_norm(critic_grads)
        policy_norm = tf.linalg.global_norm(policy_grads)
        if self._config.clipping:
            clip = self._config.max_gradient_norm
            critic_grads, _ = tf.clip_by_global_norm(critic_grads, clip, use_norm=critic_norm)
            policy_grads, _ = tf.clip_by_global_norm(policy_grads, clip, use_norm=policy_norm)
        self._guard.apply_if_finite([mean_losses[0], mean_losses[1], critic_norm, policy_norm],
                                    self.step_counter, self._apply, critic_grads, policy_grads)
        return {"critic_loss": critic_loss, "policy_loss": policy_loss, "mean_q": mean_q,
                "critic_grad_norm": critic_norm}

    def _apply(self, strategy, critic_grads, policy_grads) -> None:
        """The update, in cross-replica context; the NaN guard runs it only when all is finite."""
        apply_gradients_cross_replica(self.critic_optimizer, strategy,
                                      zip(critic_grads, self.critic.trainable_variables))
        apply_gradients_cross_replica(self.policy_optimizer, strategy,
                                      zip(policy_grads, self.policy.trainable_variables))
        # Nothing else orders the counter after the updates inside tf.function,
        # and its value labels the weights actors pull: read the updated
        # variables first so version v always means v steps applied.
        updated = self.policy.trainable_variables + self.critic.trainable_variables
        with tf.control_dependencies([v.read_value() for v in updated]):
            self.step_counter.assign_add(1)

    def _copy_targets(self) -> None:
        # Cross-replica context: assigning a mirrored variable updates every copy.
        for online, target in ((self.policy, self.target_policy), (self.critic, self.target_critic)):
            for src, dst in zip(online.variables, target.variables):
                dst.assign(src)

    def step(self) -> Dict[str, float]:
        """Runs up to ``steps_per_call`` steps (fewer to stop at a target update).

        Returns the last step's metrics (replica means) and ``learner_steps``.

        Raises:
          FloatingPointError: a loss or gradient was NaN/Inf at some step; that
            step and every later one were skipped, so the weights are those
            of the step before (see the module docstring).
          ReplayTimeoutError: replay ran dry past the rate-limiter timeout, or
            the replay server stopped answering.
        """
        period = self._config.target_update_period
        start = self.num_steps
        if start % period == 0 and start > 0:
            self._copy_fn()  # Hard update before the step at a multiple of the period.
        return self._run_steps(min(self._steps_per_call, period - start % period))

    # -------------------------------------------------------------- variables
    def checkpointables(self) -> Dict[str, Any]:
        """What a ``tf.train.Checkpoint`` must hold to resume exactly.

        Networks, target networks, both Adam optimizers (slots and
        ``iterations``) and the learner step counter.
        """
        return {"policy": self.policy, "critic": self.critic,
                "target_policy": self.target_policy, "target_critic": self.target_critic,
                "policy_optimizer": self.policy_optimizer,
                "critic_optimizer": self.critic_optimizer,
                "learner_steps": self.step_counter}

