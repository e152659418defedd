"""Small D4PG pieces shared by the D4PG tests: a tiny config, spec and batches."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from dm_env import specs

from rlplat_agents.d4pg.config import D4PGConfig
from rlplat.replay.types import Transition
from transition_batches import random_transitions
from rlplat.specs import EnvironmentSpec

OBS, ACT = 5, 2

SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32, "observations"),
    actions=specs.BoundedArray((ACT,), np.float32, -1.0, 1.0, "actions"),
    rewards=specs.Array((), np.float32), discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))


def small_config(**changes) -> D4PGConfig:
    """Tiny networks and batches: every learner step takes ~1 ms."""
    base = dict(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), num_atoms=11,
                v_min=-10.0, v_max=10.0, global_batch_size=8, min_replay_size=8,
                policy_learning_rate=1e-3, critic_learning_rate=1e-3)
    base.update(changes)
    return D4PGConfig(**base)


def random_batch(batch_size: int, seed: int = 0) -> Transition:
    """A GLOBAL batch of plausible n-step transitions (float32)."""
    return random_transitions(batch_size, OBS, ACT, end_probability=0.2, discount=0.99 ** 5, seed=seed)


def batches_dataset(batches) -> tf.data.Dataset:
    """GLOBAL batches, in order, repeated forever (``distribute`` splits them)."""
    size = batches[0].reward.shape[0]
    rows = Transition(*[np.concatenate(field) for field in zip(*batches)])
    return tf.data.Dataset.from_tensor_slices(rows).batch(size, drop_remainder=True).repeat()


def all_weights(learner) -> list:
    nets = (learner.policy, learner.critic, learner.target_policy, learner.target_critic)
    return [v.numpy() for net in nets for v in net.variables]
