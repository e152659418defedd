"""Small DDPG pieces shared by the DDPG tests: a tiny config, spec, batches, learners and a NumPy reference."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from dm_env import specs

from rlplat_agents.ddpg.config import DDPGConfig
from rlplat_agents.ddpg.learning import DDPGLearner
from rlplat import replication
from rlplat.replay.types import Transition
from transition_batches import random_transitions
from rlplat.specs import EnvironmentSpec

OBS, ACT = 5, 2
GAMMA, N_STEP = 0.9, 3

SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32, "observations"),
    actions=specs.BoundedArray((ACT,), np.float32, -1.0, 1.0, "actions"),
    rewards=specs.Array((), np.float32), discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))


def small_config(**changes) -> DDPGConfig:
    """Tiny networks and batches: a learner step takes ~1 ms."""
    base = dict(policy_layer_sizes=(16, 16), critic_layer_sizes=(16, 16), global_batch_size=8,
                min_replay_size=8, samples_per_insert=8.0, n_step=N_STEP, discount=GAMMA, tau=0.1,
                policy_learning_rate=1e-3, critic_learning_rate=1e-3)
    base.update(changes)
    return DDPGConfig(**base)


def random_batch(batch_size: int, seed: int = 0) -> Transition:
    """A GLOBAL batch of n-step transitions: discount gamma^n, or 0 where the episode ended inside the n steps."""
    return random_transitions(batch_size, OBS, ACT, end_probability=0.25, discount=GAMMA ** N_STEP, seed=seed)


def batches_dataset(batches) -> tf.data.Dataset:
    """GLOBAL batches, in order, repeated forever (``distribute`` splits them over the replicas)."""
    rows = Transition(*[np.concatenate(field) for field in zip(*batches)])
    return tf.data.Dataset.from_tensor_slices(rows).batch(batches[0].reward.shape[0], drop_remainder=True).repeat()


def make_learner(config, batches, num_replicas=1, **kwargs) -> DDPGLearner:
    repl = replication.make_replicator(num_replicas)
    return DDPGLearner(config, SPEC, repl, repl.distribute(batches_dataset(batches)), **kwargs)


def networks(learner):
    return (learner.policy, learner.critic, learner.target_policy, learner.target_critic)


def all_weights(learner) -> list:
    return [v.numpy() for net in networks(learner) for v in net.variables]


def copy_weights(src, dst) -> None:
    for a, b in zip(all_weights(src), (v for net in networks(dst) for v in net.variables)):
        b.assign(a)


_ACTIVATIONS = {"linear": lambda x: x, "relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh}


def mlp_numpy(network, x) -> np.ndarray:
    """A ``make_networks`` MLP in float64 NumPy, layer by layer (Concatenate and Reshape are the caller's)."""
    x = np.asarray(x, np.float64)
    for layer in network.layers:
        weights = [w.astype(np.float64) for w in layer.get_weights()]
        if isinstance(layer, tf.keras.layers.Dense):
            x = _ACTIVATIONS[layer.get_config()["activation"]](x @ weights[0] + weights[1])
        elif isinstance(layer, tf.keras.layers.LayerNormalization):
            mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
            x = (x - mean) / np.sqrt(var + layer.epsilon) * weights[0] + weights[1]
        elif isinstance(layer, tf.keras.layers.Activation):
            x = _ACTIVATIONS[layer.get_config()["activation"]](x)
    return x


def q_numpy(critic, obs, action) -> np.ndarray:
    assert isinstance(critic.layers[0], tf.keras.layers.Concatenate)
    return mlp_numpy(critic, np.concatenate([obs, action], axis=-1))[:, 0]
