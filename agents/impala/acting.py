"""The IMPALA actor: a NumPy copy of the policy, sampling actions, writing unrolls.

Per step the actor records, through ``SequenceAdder``: the action it sampled,
the behaviour policy's outputs (``extras``: categorical logits, or Gaussian
mean and log-std; plus the LSTM state the step started from), the log-prob of
the action under that policy, and the version of the weights that chose it.
The learner turns these into importance weights (V-trace) and policy lag.

TensorFlow never runs per step: the policy is ``numpy_policy.NumpyPolicy``.
Weights are pulled before the first action (a bounded wait: no random policy
ever acts) and then every ``variable_update_period`` observed steps; a pull
that finds nothing newer moves no weights.

Continuous actions (``config.squash``): the actor samples ``u ~ N(mean,
std)`` and sends ``tanh(u)`` ("tanh") or ``clip(u, -1, 1)`` ("clip") to the
environment; replay keeps ``u``, and the recorded log-prob is that of the
action the environment got (for "tanh", with the Jacobian: see
``rlplat.losses.policy_gradient.tanh_gaussian_log_prob``; the learner computes the same).

``evaluation=True`` acts greedily (argmax, or tanh / clip of the Gaussian
mean) and records nothing.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import dm_env
import numpy as np
from dm_env import specs

from rlplat_agents.impala.numpy_policy import LOG_STD_MAX, LOG_STD_MIN, NumpyPolicy, squash_log_std_numpy
from rlplat import core

LOG_2PI = float(np.log(2.0 * np.pi))
# Uniforms drawn per Generator call for discrete sampling: one call per step
# would cost as much as the policy itself.
DRAWS_PER_BLOCK = 1024


def extras_spec(environment_spec: Any, config: Any) -> Dict[str, specs.Array]:
    """What the actor records per step besides the action (the unroll's ``extras``)."""
    actions = environment_spec.actions
    out: Dict[str, specs.Array] = {}
    if isinstance(actions, specs.DiscreteArray):
        out["logits"] = specs.Array((int(actions.num_values),), np.float32)
    else:
        size = int(np.prod(actions.shape))
        out["mean"] = specs.Array((size,), np.float32)
        out["log_std"] = specs.Array((size,), np.float32)
    if config.core == "lstm":
        out["core_state"] = specs.Array((2 * config.lstm_size,), np.float32)
    return out


def action_spec_for_replay(environment_spec: Any) -> specs.Array:
    """Actions as replay stores them: a scalar for discrete, a flat vector otherwise."""
    actions = environment_spec.actions
    if isinstance(actions, specs.DiscreteArray):
        return specs.Array((), np.float32)
    return specs.Array((int(np.prod(actions.shape)),), np.float32)


def make_numpy_policy(environment_spec: Any, config: Any) -> NumpyPolicy:
    """A NumPy policy shaped for ``config``, read from a fresh Keras network (weights come from the learner)."""
    from rlplat_agents.impala import networks  # pylint: disable=g-import-not-at-top  (TensorFlow, only here)

    return networks.numpy_policy_of(networks.make_network(environment_spec, config))


def tanh_log_det_jacobian(u: np.ndarray) -> np.ndarray:
    """NumPy twin of ``rlplat.losses.policy_gradient.tanh_log_det_jacobian``, summed over the last axis.

    One action gives a scalar, a batch [K, A] gives [K] (``vector_acting``).
    """
    return np.sum(2.0 * (np.log(2.0) - u - np.logaddexp(0.0, -2.0 * u)), axis=-1)


class IMPALAActor(core.PullingActor):
    """Samples from the current policy and records unrolls (see module docstring).

    Args:
      policy: a ``NumpyPolicy`` (its weights are replaced on every pull).
      action_spec: the environment's action spec.
      variable_source: serves ``get_variables(["policy"])``.
      adder: a ``SequenceAdder`` (or anything with ``add_first``/``add``);
        None records nothing.
      seed: seeds action sampling.
      evaluation: act greedily.
      variable_update_period: observed steps between weight pulls.
      wait_timeout_s: how long the first pull may wait for weights.
      squash: "tanh" or "clip" (continuous actions; see the module docstring).
      log_std_bounds: the Gaussian's log-std (low, high), as the learner's.
    """

    def __init__(self, policy: NumpyPolicy, action_spec: Any,
                 variable_source: core.VariableSource, adder: Any = None, *,
                 seed: Optional[int] = None, evaluation: bool = False,
                 variable_update_period: int = 100, wait_timeout_s: float = 120.0,
                 squash: str = "tanh",
                 log_std_bounds=(LOG_STD_MIN, LOG_STD_MAX)):
        super().__init__(variable_source, variable_update_period, wait_timeout_s)
        if squash not in ("tanh", "clip"):
            raise ValueError(f"squash must be 'tanh' or 'clip' (got {squash!r})")
        self._tanh = squash == "tanh"
        self._log_std_bounds = (float(log_std_bounds[0]), float(log_std_bounds[1]))
        self._policy = policy
        self._discrete = isinstance(action_spec, specs.DiscreteArray)
        self._action_shape = tuple(action_spec.shape)
        self._adder = adder
        self._greedy = bool(evaluation)
        self._rng = np.random.default_rng(seed)
        self._state = None       # core state at the current observation
        self._next_state = None  # core state after it (once an action was chosen)
        self._record: tuple = ()  # (replay action, extras, log_prob) of the last action
        self._draws = np.zeros(0, np.float64)
        self._draw_index = 0

    # --------------------------------------------------------------- acting
    def select_action(self, observation: np.ndarray):
        if self._version < 0:
            self.update(wait=True)
        if self._state is None and self._policy.state_size:
            self._state = self._policy.initial_state()
        out, self._next_state = self._policy(observation, self._state)
        return self._act_on(out)

    # ``rlplat.vector_loop.BatchActing``: K environments, one policy call (MLP core).
    def policy_outputs(self, observations: np.ndarray) -> np.ndarray:
        """Policy outputs [K, P] (logits, or mean and raw log-std) for observations [K, ...]."""
        if self._version < 0:
            self.update(wait=True)
        return self._policy.batch(observations)

    def finish_action(self, output: np.ndarray, policy_version: int):
        """This actor's sample from one row of ``policy_outputs``; its unroll records ``policy_version``."""
        self._version = int(policy_version)  # the weights that chose it (the leader pulled them)
        return self._act_on(output)

    def _act_on(self, out: np.ndarray):
        """The action for policy outputs ``out``; records what the adder needs."""
        extras: Dict[str, np.ndarray] = {}
        if self._discrete:
            extras["logits"] = out
            if self._greedy:
                action, log_prob = int(np.argmax(out)), 0.0
            else:
                # Inverse-CDF sampling with pre-drawn uniforms: one Generator
                # call per step would cost as much as the policy itself.
                shifted = out - out.max()
                cdf = np.cumsum(np.exp(shifted))
                action = int(np.searchsorted(cdf, self._uniform() * cdf[-1], side="right"))
                action = min(action, len(cdf) - 1)
                log_prob = float(shifted[action] - np.log(cdf[-1]))
            replay_action = np.float32(action)
            env_action = np.int32(action)
        else:
            size = out.shape[0] // 2
            mean = out[:size]
            log_std = squash_log_std_numpy(out[size:], *self._log_std_bounds).astype(np.float32)
            extras["mean"], extras["log_std"] = mean, log_std
            if self._greedy:
                sample, log_prob = mean, 0.0
            else:
                noise = self._rng.standard_normal(size).astype(np.float32)
                sample = (mean + np.exp(log_std) * noise).astype(np.float32)
                log_prob = float(np.sum(-0.5 * noise * noise - log_std) - 0.5 * LOG_2PI * size)
                if self._tanh:
                    log_prob -= float(tanh_log_det_jacobian(sample.astype(np.float64)))
            # Replay keeps the pre-squash sample, the log-prob's argument.
            replay_action = sample.astype(np.float32)
            bounded = np.tanh(sample) if self._tanh else np.clip(sample, -1.0, 1.0)
            env_action = bounded.astype(np.float32).reshape(self._action_shape)
        if self._state is not None:
            extras["core_state"] = self._state
        self._record = (replay_action, extras, log_prob)
        return env_action

    def _uniform(self) -> float:
        if self._draw_index >= len(self._draws):
            self._draws = self._rng.random(DRAWS_PER_BLOCK)
            self._draw_index = 0
        value = self._draws[self._draw_index]
        self._draw_index += 1
        return value

    # ------------------------------------------------------------ observing
    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        self._state = None  # Zeros at the first action (once weights set the size).
        if self._adder is not None:
            self._adder.add_first(timestep)

    def observe(self, action, next_timestep: dm_env.TimeStep) -> None:
        del action  # The recorded one (the unclipped sample) is in self._record.
        if self._adder is not None:
            replay_action, extras, log_prob = self._record
            self._adder.add(replay_action, next_timestep, extras=extras,
                            behaviour_log_prob=log_prob, policy_version=self._version)
        self._state = self._next_state
        self._count_step()

    # -------------------------------------------------------------- weights
    def _load_policy(self, arrays) -> None:
        self._policy.load(arrays)
