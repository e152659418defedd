"""IMPALAVectorActor: K environments' IMPALA actors as one object, the per-environment work batched.

``rlplat.vector_loop`` can drive K separate ``IMPALAActor``s (one policy
call for all K, then sampling, log-probs and a ``SequenceAdder.add`` per
environment). At CartPole's ~7 us per step, that per-environment Python work
costs more than the environment. This actor does the same for all K rows at
once: one policy call, inverse-CDF (or Gaussian) sampling and log-probs as
[K, ...] NumPy expressions, and one ``BatchSequenceAdder.add`` per step.

What each environment gets is unchanged: environment k samples from its own
generator (``np.random.default_rng(seeds[k])``, drawn in blocks in the same
order as an ``IMPALAActor`` with that seed draws them), so its actions are
those of a separate ``IMPALAActor``, and its unrolls are its own replay
stream (``BatchSequenceAdder``). Weights are pulled as by one actor (before
the first action, then every ``variable_update_period`` steps of all K).
Feed-forward cores only: an LSTM's per-environment state has no batched
path (use one ``IMPALAActor`` per environment).
"""

from __future__ import annotations

import functools
from typing import Any, List, Optional, Sequence

import dm_env
import numpy as np
from dm_env import specs

from rlplat_agents.impala import acting
from rlplat_agents.impala.numpy_policy import LOG_STD_MAX, LOG_STD_MIN, NumpyPolicy, squash_log_std_numpy
from rlplat import core
from rlplat.vector_loop import BlockedDraws


class IMPALAVectorActor(core.WeightPuller):
    """A ``rlplat.vector_loop.VectorActor`` sampling IMPALA's behaviour policy for K environments.

    Args:
      policy: a feed-forward ``NumpyPolicy`` (its weights are replaced on every pull).
      action_spec: the environment's action spec.
      variable_source: serves ``get_variables(["policy"])``.
      adder: a ``BatchSequenceAdder`` with K streams, or None to record nothing.
      seeds: K seeds, one per environment (as each ``IMPALAActor``'s ``seed``).
      variable_update_period, wait_timeout_s, squash, log_std_bounds: as for
        ``acting.IMPALAActor``.
    """

    def __init__(self, policy: NumpyPolicy, action_spec: Any, variable_source: core.VariableSource,
                 adder: Any, seeds: Sequence[int], *, variable_update_period: int = 100,
                 wait_timeout_s: float = 120.0, squash: str = "tanh",
                 log_std_bounds=(LOG_STD_MIN, LOG_STD_MAX)):
        super().__init__(variable_source, variable_update_period, wait_timeout_s)
        if policy.state_size:
            raise ValueError("an LSTM policy acts one environment at a time; use one IMPALAActor each")
        if squash not in ("tanh", "clip"):
            raise ValueError(f"squash must be 'tanh' or 'clip' (got {squash!r})")
        if adder is not None and adder.num_streams != len(seeds):
            raise ValueError(f"the adder has {adder.num_streams} streams for {len(seeds)} environments")
        self._policy = policy
        self._adder = adder
        self._tanh = squash == "tanh"
        self._log_std_bounds = (float(log_std_bounds[0]), float(log_std_bounds[1]))
        self._discrete = isinstance(action_spec, specs.DiscreteArray)
        self._action_shape = tuple(action_spec.shape)
        # Per environment, its own generator's draws in blocks: uniforms
        # (discrete) or standard normals (continuous, one row per action).
        self._draw_shape = () if self._discrete else (int(np.prod(self._action_shape)),)
        self._draws = BlockedDraws([functools.partial(self._block, np.random.default_rng(seed)) for seed in seeds])
        self._rows = np.arange(len(seeds))
        self._record: tuple = ()  # (replay actions, extras, log-probs) of the last actions

    @property
    def num_environments(self) -> int:
        return len(self._rows)

    def observe_first(self, index: int, timestep: dm_env.TimeStep) -> None:
        if self._adder is not None:
            self._adder.add_first(index, timestep)

    def select_actions(self, observations: np.ndarray) -> np.ndarray:
        """Sampled actions for environments 0..M-1 (int32 [M], or float32 [M, *action shape])."""
        if self._version < 0:
            self.update(wait=True)
        out = self._policy.batch(observations)
        draws = self._draws.take(len(out))
        if self._discrete:
            # Inverse-CDF sampling, row by row the expressions of IMPALAActor._act_on.
            shifted = out - out.max(axis=1, keepdims=True)
            cdf = np.cumsum(np.exp(shifted), axis=1)
            total = cdf[:, -1]
            # searchsorted(cdf, u * total, side="right") per row: how many cdf entries are <= u * total.
            action = np.minimum(np.sum(cdf <= (draws * total)[:, None], axis=1), cdf.shape[1] - 1)
            log_prob = shifted[self._rows[:len(out)], action] - np.log(total)
            self._record = (action.astype(np.float32), {"logits": out}, log_prob)
            return action.astype(np.int32)
        size = out.shape[1] // 2
        mean = out[:, :size]
        log_std = squash_log_std_numpy(out[:, size:], *self._log_std_bounds).astype(np.float32)
        noise = draws.astype(np.float32)
        sample = (mean + np.exp(log_std) * noise).astype(np.float32)
        # Summed in float32, then float64 from the constant on: IMPALAActor's precision exactly.
        log_prob = np.sum(-0.5 * noise * noise - log_std, axis=1).astype(np.float64) - 0.5 * acting.LOG_2PI * size
        if self._tanh:  # the Jacobian of tanh, per row
            log_prob = log_prob - acting.tanh_log_det_jacobian(sample.astype(np.float64))
        # Replay keeps the pre-squash sample, the log-prob's argument.
        self._record = (sample, {"mean": mean, "log_std": log_std}, log_prob)
        bounded = np.tanh(sample) if self._tanh else np.clip(sample, -1.0, 1.0)
        return bounded.astype(np.float32).reshape((len(out),) + self._action_shape)

    def observe(self, actions: Sequence[Any], timesteps: Sequence[dm_env.TimeStep]) -> None:
        del actions  # The recorded ones (the unsquashed samples) are in self._record.
        if self._adder is not None:
            replay_actions, extras, log_probs = self._record
            self._adder.add(replay_actions, timesteps, extras=extras, behaviour_log_probs=log_probs,
                            policy_version=self._version)
        self._count_step()

    def close(self) -> None:
        """Flushes and closes the adder."""
        if self._adder is not None:
            self._adder.close()

    def _block(self, rng: np.random.Generator) -> np.ndarray:
        if self._discrete:
            return rng.random(acting.DRAWS_PER_BLOCK)
        return rng.standard_normal((acting.DRAWS_PER_BLOCK,) + self._draw_shape)

    def _load_policy(self, arrays: List[np.ndarray]) -> None:
        self._policy.load(arrays)


def make_vector_actor(builder: Any, environment_spec: Any, variable_source: core.VariableSource,
                      replay_address: Optional[str], seeds: Sequence[int]) -> IMPALAVectorActor:
    """``IMPALABuilder.make_vector_actor``'s actor: the builder's policy, a K-stream adder on its queue."""
    adder = None
    if replay_address is not None:
        from rlplat.replay import reverb_client  # pylint: disable=g-import-not-at-top
        from rlplat.replay.batch_sequence_adder import BatchSequenceAdder  # pylint: disable=g-import-not-at-top

        adder = BatchSequenceAdder(reverb_client.Client(replay_address), builder.replay_table,
                                   builder.config.unroll_length, len(seeds),
                                   signature=builder.signature(environment_spec),
                                   insert_timeout_s=builder.insert_timeout_s)
    cfg = builder.config
    return IMPALAVectorActor(acting.make_numpy_policy(environment_spec, cfg), environment_spec.actions,
                             variable_source, adder, seeds, variable_update_period=cfg.variable_update_period,
                             squash=cfg.squash, log_std_bounds=(cfg.min_log_std, cfg.max_log_std))
