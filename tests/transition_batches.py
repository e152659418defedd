"""Random n-step transition batches for the learner tests of the DPG agents (D4PG, DDPG)."""

import numpy as np

from rlplat.replay.types import Transition


def random_transitions(batch_size: int, obs_size: int, action_size: int, *, end_probability: float,
                       discount: float, seed: int = 0) -> Transition:
    """A GLOBAL float32 batch: actions in [-1, 1], rewards in [0, 2], and the stored discount
    ``discount`` (gamma^n), or 0 with ``end_probability`` (the episode ended inside the n steps)."""
    rng = np.random.default_rng(seed)
    return Transition(
        observation=rng.normal(size=(batch_size, obs_size)).astype(np.float32),
        action=rng.uniform(-1, 1, (batch_size, action_size)).astype(np.float32),
        reward=rng.uniform(0, 2, batch_size).astype(np.float32),
        discount=np.where(rng.uniform(size=batch_size) < end_probability, 0.0, discount).astype(np.float32),
        next_observation=rng.normal(size=(batch_size, obs_size)).astype(np.float32))
