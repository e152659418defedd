"""Shared pieces for the IMPALA agent tests: specs, configs, hand-made unroll batches."""

import numpy as np
import tensorflow as tf
from dm_env import specs

from rlplat_agents.impala import acting
from rlplat_agents.impala.config import IMPALAConfig
from rlplat.replay.sequence_signature import SequenceStep
from rlplat.specs import EnvironmentSpec

OBS = 4
NUM_ACTIONS = 3
DISCRETE_SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32),
    actions=specs.DiscreteArray(NUM_ACTIONS, dtype=np.int32),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))
CONTINUOUS_SPEC = DISCRETE_SPEC._replace(
    actions=specs.BoundedArray((2,), np.float32, -1.0, 1.0))


def small_config(**changes) -> IMPALAConfig:
    base = dict(unroll_length=5, global_batch_size=8, layer_sizes=(16, 16), lstm_size=8,
                queue_size=32)
    base.update(changes)
    return IMPALAConfig(**base)


def random_batch(spec, config, batch_size, seed=0, versions=None, pad_from=None):
    """A [B, T+1] batch of unrolls as the queue would give them.

    ``versions``: per-unroll policy versions (default 0). ``pad_from``: per
    unroll, the first step index with mask 0 (default: none padded).
    """
    rng = np.random.default_rng(seed)
    t1 = config.unroll_length + 1
    discrete = isinstance(spec.actions, specs.DiscreteArray)
    if discrete:
        action = rng.integers(0, spec.actions.num_values, (batch_size, t1)).astype(np.float32)
    else:
        action = rng.normal(size=(batch_size, t1) + spec.actions.shape).astype(np.float32)
    extras = {k: rng.normal(size=(batch_size, t1) + s.shape).astype(np.float32) * 0.1
              for k, s in acting.extras_spec(spec, config).items()}
    mask = np.ones((batch_size, t1), np.float32)
    if pad_from is not None:
        for b, start in enumerate(pad_from):
            mask[b, start:] = 0.0
    version = np.zeros((batch_size, t1), np.int64)
    if versions is not None:
        version[:] = np.asarray(versions, np.int64)[:, None]
    return SequenceStep(
        observation=rng.normal(size=(batch_size, t1, OBS)).astype(np.float32),
        action=action,
        reward=rng.normal(size=(batch_size, t1)).astype(np.float32),
        discount=(rng.random((batch_size, t1)) > 0.1).astype(np.float32),
        extras=extras,
        behaviour_log_prob=np.log(rng.uniform(0.2, 0.9, (batch_size, t1))).astype(np.float32),
        policy_version=version,
        mask=mask)


def batches_dataset(batches):
    """An infinite dataset cycling through GLOBAL batches (for ``replicator.distribute``)."""
    stacked = tf.nest.map_structure(lambda *xs: np.stack(xs), *batches)
    return tf.data.Dataset.from_tensor_slices(stacked).repeat()
