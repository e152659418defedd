"""GaussianActor with a plain Keras policy (not D4PG's): greedy = Keras, N(0, sigma^2) noise, clipping, batches.

D4PG's actor tests (tests/agents/d4pg/test_d4pg_acting.py) cover pulls, waits and the adder.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from rlplat.gaussian_actor import GaussianActor

from fixed_weights import FixedWeights


def _source(policy):
    return FixedWeights([v.numpy() for v in policy.variables], version=3)


def _policy(scale):
    tf.keras.utils.set_random_seed(0)
    def init(seed):
        return tf.keras.initializers.RandomNormal(stddev=scale, seed=seed)

    policy = tf.keras.Sequential([tf.keras.layers.Dense(8, "relu", kernel_initializer=init(1)),
                                  tf.keras.layers.Dense(3, "tanh", kernel_initializer=init(2))])
    policy(tf.zeros((1, 4)))
    return policy


def test_for_policy_runs_the_keras_policy_in_numpy_with_noise_and_clipping():
    policy = _policy(0.5)
    obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    greedy = GaussianActor.for_policy(policy, _source(policy), sigma=0.5, evaluation=True)
    want = policy(obs).numpy()
    np.testing.assert_allclose(np.stack([greedy.select_action(o) for o in obs]), want, atol=1e-5)
    assert greedy.policy_version == 3 and greedy.sigma == 0.0
    np.testing.assert_allclose(greedy.policy_outputs(obs), want, atol=1e-5)  # the batched path agrees

    quiet = _policy(1e-3)  # actions ~0: the noise is barely clipped at sigma 0.2
    noisy = GaussianActor.for_policy(quiet, _source(quiet), sigma=0.2, seed=1)
    noise = np.stack([noisy.select_action(obs[0]) for _ in range(4000)]) - quiet(obs[:1]).numpy()
    np.testing.assert_allclose(noise.std(axis=0), 0.2, rtol=0.06)
    loud = GaussianActor.for_policy(quiet, _source(quiet), sigma=5.0, seed=2)
    actions = np.stack([loud.finish_action(row, 3) for row in loud.policy_outputs(np.repeat(obs, 50, 0))])
    assert actions.dtype == np.float32 and np.all(np.abs(actions) <= 1.0) and np.any(np.abs(actions) == 1.0)


def test_the_vector_actor_acts_as_separate_actors_across_noise_blocks_and_a_zero_sigma():
    from rlplat.gaussian_actor import NOISE_BLOCK, GaussianVectorActor
    from rlplat.utils import numpy_layers

    policy = _policy(0.5)
    seeds, sigmas = [4, 5, 6], [0.3, 0.0, 2.0]
    vector = GaussianVectorActor(numpy_layers.export_layers(policy.layers), _source(policy), None, seeds, sigmas)
    separate = [GaussianActor.for_policy(policy, _source(policy), sigma=s, seed=seed) for seed, s in zip(seeds, sigmas)]
    obs = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    for step in range(NOISE_BLOCK + 10):  # past the first block of pre-drawn noise
        m = 3 if step % 7 else 2  # partial rounds step the first M environments only
        actions = vector.select_actions(obs[:m])
        outputs = separate[0].policy_outputs(obs[:m])
        want = np.stack([actor.finish_action(row, 3) for actor, row in zip(separate, outputs)])
        np.testing.assert_array_equal(actions, want)
    assert vector.policy_version == 3 and vector.num_environments == 3
    assert np.all(np.abs(actions) <= 1.0) and np.any(np.abs(actions) == 1.0)  # sigma 2 clips
