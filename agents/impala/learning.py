"""The IMPALA learner: V-trace actor-critic on batches of unrolls, replicated.

The step (``_step_fn``) is written for ONE replica and follows the platform's
gradient convention: gradients are averaged with an explicit
``all_reduce(grads, "mean")`` and applied with
``skip_gradients_aggregation=True``; clipping happens after the all-reduce.

Normalisation across replicas. Unrolls carry padding (after an episode end)
and dropped (too-old) unrolls, so replicas hold different numbers of real
steps. Each replica therefore sums its per-step losses and divides by the
GLOBAL count of real steps (an all-reduce sum) times ``1 / num_replicas``;
after the gradient mean, N replicas at global batch B compute exactly the
gradient of the mean loss over the whole batch, as one device does.

Policy lag. Each unroll's lag is ``learner_step - policy_version[step 0]``
(step 0 holds the oldest version in the unroll; the actor may pull new
weights mid-unroll). Mean and max over the batch are returned every step;
with ``max_policy_lag`` set, unrolls with a larger lag get mask 0 (they
contribute nothing to any loss or gradient) and are counted, per step and in
a checkpointed total.

NaN guard (``rlplat.utils.nonfinite``): after the all-reduce, every step
checks the three loss parts (global means) and the gradient norm, and applies
the update and moves the counters only when all are finite. The first
non-finite step is recorded, the rest of the call is skipped (the weights stay
those of the last finite step), and ``step()`` raises ``FloatingPointError``
naming that step and the loss.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import tensorflow as tf

from rlplat_agents.impala import networks
from rlplat_agents.impala.config import IMPALAConfig
from rlplat import replication
from rlplat.losses import policy_gradient as pg_losses
from rlplat.losses.vtrace import vtrace
from rlplat.replay import datasets as replay_datasets
from rlplat.replay.sequence_signature import as_sequence_step
from rlplat.replay_fed_learner import ReplayFedLearner
from rlplat.utils import nonfinite
from rlplat.utils.optimizers import FusedAdam, apply_gradients_cross_replica

# What the NaN guard watches (in this order); each part is the global mean.
_GUARDED = ("policy-gradient loss", "baseline loss", "entropy loss", "gradient")
_FIXES = {"*": "lower --learning-rate or check the rewards for NaN/Inf"}


class IMPALALearner(ReplayFedLearner):
    """Trains an ``IMPALANetwork`` on batches of ``SequenceStep`` unrolls.

    Args:
      config: the agent's hyperparameters.
      environment_spec: an ``EnvironmentSpec``.
      replicator: where the step runs.
      iterator: per-replica batches of ``SequenceStep`` ([B, T+1, ...]), from
        ``replicator.distribute(...)`` (a Reverb ``input_fn`` or an in-memory
        dataset of GLOBAL batches in tests).
      steps_per_call: learner steps per ``step()`` (one tf.function call).
      replay_address, replay_table: enable the dead-server watchdog and the
        "replay ran dry" translation; None for in-memory iterators.
      rate_limiter_timeout_ms: the dataset's sampling timeout (for messages).
      step_timeout_s: how long a call may run before the server is probed.

    Attributes:
      network: the ``IMPALANetwork`` (variables mirrored over replicas).
      optimizer: Adam.
      step_counter: int64 variable, learner steps (checkpointed).
      dropped_counter: int64 variable, unrolls dropped for policy lag (checkpointed).
    """

    STEP_AUTOGRAPH = False  # no Python control flow on tensors in the step
    NAME = "IMPALA"
    FIXES = _FIXES

    def __init__(self, config: IMPALAConfig, environment_spec: Any,
                 replicator: replication.Replicator, iterator: Iterator, *,
                 steps_per_call: int = 4,
                 replay_address: Optional[str] = None, replay_table: Optional[str] = None,
                 rate_limiter_timeout_ms: int = replay_datasets.DEFAULT_RATE_LIMITER_TIMEOUT_MS,
                 step_timeout_s: float = 60.0):
        super().__init__(replicator, iterator, steps_per_call=steps_per_call, replay_address=replay_address,
                         replay_table=replay_table, rate_limiter_timeout_ms=rate_limiter_timeout_ms,
                         step_timeout_s=step_timeout_s)
        replicator.per_replica_batch_size(config.global_batch_size)  # Divisible, or a clear error.
        self._config = config
        precision = self._resolve_precision(config).precision  # "auto" -> fp32 or bf16, here
        with replicator.scope():
            self.network = networks.make_network(environment_spec, config, precision)
            self.optimizer = FusedAdam(config.learning_rate, epsilon=config.adam_epsilon)
            self.optimizer.build(self.network.trainable_variables)
            counter = dict(dtype=tf.int64, trainable=False,
                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.step_counter = tf.Variable(0, name="learner_steps", **counter)
            self.dropped_counter = tf.Variable(0, name="dropped_unrolls", **counter)
            self._guard = nonfinite.NonFiniteGuard(_GUARDED)
        self._acting_variables = networks.acting_variables(self.network)
        self._serve(self._acting_variables)

    # ------------------------------------------------------------------- loss
    def _per_step_losses(self, batch, keep):
        """Per-replica SUMS of the loss parts over real steps, and their count."""
        cfg = self._config
        batch = as_sequence_step(batch)
        time_major = lambda x: tf.transpose(  # noqa: E731  [B, T+1, ...] -> [T+1, B, ...]
            x, [1, 0] + list(range(2, len(x.shape))))
        core_state = batch.extras.get("core_state") if isinstance(batch.extras, dict) else None
        policy_out, values = self.network.unroll(
            batch.observation, None if core_state is None else core_state[:, 0])
        policy_out, values = time_major(policy_out)[:-1], time_major(values)
        actions = time_major(batch.action)[:-1]
        mask = time_major(batch.mask)[:-1] * keep[tf.newaxis, :]
        if self.network.discrete:
            log_pi = pg_losses.categorical_log_prob(policy_out, actions)
            entropy = pg_losses.categorical_entropy(policy_out)
        elif cfg.squash == "tanh":
            mean, log_std = self.network.gaussian(policy_out)
            log_pi = pg_losses.tanh_gaussian_log_prob(mean, log_std, actions)
            # The behaviour's own standard-normal draw, recovered from the
            # recorded sample: a fresh N(0, 1) sample whatever the parameters
            # now are, and deterministic (no RNG in the step).
            noise = tf.stop_gradient((actions - time_major(batch.extras["mean"])[:-1])
                                     * tf.exp(-time_major(batch.extras["log_std"])[:-1]))
            entropy = pg_losses.tanh_gaussian_entropy(mean, log_std, noise)
        else:
            mean, log_std = self.network.gaussian(policy_out)
            log_pi = pg_losses.gaussian_log_prob(mean, log_std, actions)
            entropy = pg_losses.gaussian_entropy(log_std)
        log_rho = tf.stop_gradient(log_pi - time_major(batch.behaviour_log_prob)[:-1])
        returns = vtrace(tf.stop_gradient(values[:-1]), tf.stop_gradient(values[1:]),
                         cfg.reward_scale * time_major(batch.reward)[:-1],
                         cfg.discount * time_major(batch.discount)[:-1], log_rho,
                         mask_t=mask, clip_rho_threshold=cfg.clip_rho_threshold,
                         clip_c_threshold=cfg.clip_c_threshold)
        sums = {
            "policy_gradient_loss": tf.reduce_sum(
                pg_losses.policy_gradient_loss(log_pi, returns.pg_advantages, mask)),
            "baseline_loss": tf.reduce_sum(pg_losses.baseline_loss(returns.vs, values[:-1], mask)),
            "entropy_loss": tf.reduce_sum(pg_losses.entropy_loss(entropy, mask)),
            "vs": tf.reduce_sum(returns.vs * mask),
        }
        return sums, tf.reduce_sum(mask)

    def _observation_moment_sums(self, batch, keep) -> Dict[str, tf.Tensor]:
        """The batch's real observations (all replicas) as moment sums about the running mean."""
        net = self.network
        obs = tf.reshape(tf.cast(batch.observation, tf.float32),
                         [tf.shape(batch.mask)[0], tf.shape(batch.mask)[1], -1])
        # Steps with mask 1 hold an observation an action was taken at (no
        # padding); the bootstrap step T is step 0 of the next unroll.
        weight = (batch.mask[:, :-1] * keep[:, tf.newaxis])[..., tf.newaxis]
        shifted = obs[:, :-1] - net.obs_mean
        return replication.all_reduce(
            {"count": tf.reduce_sum(weight),
             "sum": tf.reduce_sum(weight * shifted, axis=[0, 1]),
             "sum_sq": tf.reduce_sum(weight * tf.square(shifted), axis=[0, 1])}, "sum")

    def _step_fn(self, batch) -> Dict[str, tf.Tensor]:
        """One learner step on this replica's batch (see module docstring)."""
        cfg = self._config
        batch = as_sequence_step(batch)
        version = self.step_counter.read_value()
        lag = version - batch.policy_version[:, 0]  # [B] int64
        if cfg.max_policy_lag is None:
            keep = tf.ones_like(lag, tf.float32)
        else:
            keep = tf.cast(lag <= cfg.max_policy_lag, tf.float32)
        # Counts for the global normaliser, from data alone (no gradient).
        local_count = tf.reduce_sum(batch.mask[:, :-1] * keep[:, tf.newaxis])
        lag_f = tf.cast(lag, tf.float32)
        totals = replication.all_reduce(
            {"count": local_count, "dropped": tf.reduce_sum(1.0 - keep),
             "lag_sum": tf.reduce_sum(lag_f), "unrolls": tf.cast(tf.size(lag_f), tf.float32)},
            "sum")
        lag_max = replication.all_reduce(tf.reduce_max(lag_f), "max")
        scale = 1.0 / (tf.maximum(totals["count"], 1.0) / replication.num_replicas())
        variables = self.network.trainable_variables
        with tf.GradientTape() as tape:
            sums, _ = self._per_step_losses(batch, keep)
            parts = {k: v * scale for k, v in sums.items()}
            loss = (parts["policy_gradient_loss"] + cfg.baseline_cost * parts["baseline_loss"]
                    + cfg.entropy_cost * parts["entropy_loss"])
        # One all-reduce for the gradients and the loss parts (for the NaN
        # guard: their replica mean is the global mean, non-finite if any is).
        names = ("policy_gradient_loss", "baseline_loss", "entropy_loss")
        grads, global_parts = replication.all_reduce(
            [tape.gradient(loss, variables), tf.stack([parts[k] for k in names])], "mean")
        grad_norm = tf.linalg.global_norm(grads)
        grads, _ = tf.clip_by_global_norm(grads, cfg.max_gradient_norm, use_norm=grad_norm)
        # The moments move with the weights, inside the guard: a skipped step
        # leaves them as they were too.
        moments = (self._observation_moment_sums(batch, keep)
                   if self.network.normalize_observations else {})
        self._guard.apply_if_finite(tf.unstack(global_parts) + [grad_norm], self.step_counter,
                                    self._apply, grads, totals["dropped"], moments)
        # Each replica's parts are N x its share of the global mean, so their
        # replica MEAN (the Replicator's output reduction) is the global mean.
        metrics = dict(parts)
        metrics["mean_vs"] = metrics.pop("vs")
        metrics.update({
            "total_loss": loss, "grad_norm": grad_norm,
            "policy_lag_mean": totals["lag_sum"] / tf.maximum(totals["unrolls"], 1.0),
            "policy_lag_max": lag_max, "dropped_unrolls": totals["dropped"],
            "real_steps": totals["count"],
        })
        return metrics

    def _apply(self, strategy, grads, dropped, moments) -> None:
        """The update, in cross-replica context; the NaN guard runs it only when all is finite."""
        variables = self.network.trainable_variables
        apply_gradients_cross_replica(self.optimizer, strategy, zip(grads, variables))
        if moments:
            # After the loss (ops on one resource run in program order), so this
            # step's loss saw the moments the actors used; before the version
            # moves (the increment below waits for every acting variable).
            self.network.update_observation_moments(
                *(nonfinite.first_local(strategy, moments[k]) for k in ("count", "sum", "sum_sq")))
        # The version moves only once the new weights are in place. Nothing
        # else orders the increment after the update (tf.function orders ops
        # per resource only), and TF did run it before the batch even arrived:
        # weights served as version v were v-1's and unrolls looked newer than
        # the learner. Reading every variable after its update (same resource:
        # ordered) and making the increment wait for those reads fixes it.
        # Every replica holds the same global numbers: the first one's is kept.
        with tf.control_dependencies([v.read_value() for v in networks.acting_variables(self.network)]
                                     + [v.read_value() for v in variables]):
            self.step_counter.assign_add(1)
            self.dropped_counter.assign_add(tf.cast(nonfinite.first_local(strategy, dropped), tf.int64))

    def step(self) -> Dict[str, float]:
        """Runs ``steps_per_call`` steps; returns the last step's metrics.

        Adds ``learner_steps`` and ``dropped_unrolls_total``.

        Raises:
          FloatingPointError: a loss part or the gradient was NaN/Inf at some
            step; it and the rest of the call were skipped (weights unchanged).
          ReplayTimeoutError: replay ran dry past the timeout, or the server died.
        """
        out = self._run_steps(self._steps_per_call)
        out["dropped_unrolls_total"] = float(self.dropped_counter.numpy())
        return out

    # -------------------------------------------------------------- variables
    @property
    def num_dropped(self) -> int:
        """Unrolls dropped for policy lag so far (restored with a checkpoint)."""
        return int(self.dropped_counter.numpy())

    def checkpointables(self) -> Dict[str, Any]:
        """Network, optimizer (slots and iterations) and both counters."""
        return {"network": self.network, "optimizer": self.optimizer,
                "learner_steps": self.step_counter, "dropped_unrolls": self.dropped_counter}

