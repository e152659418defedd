"""Helpers shared by the replay tests (feeding episodes, reading items)."""

from __future__ import annotations

import dm_env
import numpy as np

from rlplat import replay

OBS_DIM, ACT_DIM = 5, 1


def drain(client, table="queue"):
    """Pops every item of a queue table, in insertion order."""
    size = client.server_info(timeout=5)[table].current_size
    if not size:
        return []
    samples = client.sample(
        table, num_samples=size, emit_timesteps=False, unpack_as_table_signature=True
    )
    return [replay.Transition(*s.data) for s in samples]


def obs(t):
    return np.full((OBS_DIM,), float(t))


def run_episode(adder, rewards, last_discount, discounts=None, first_obs=0, end=True):
    """Feeds one episode; observation t is ``full(5, first_obs + t)``."""
    adder.add_first(dm_env.restart(obs(first_obs)))
    for t, r in enumerate(rewards, start=1):
        last = end and t == len(rewards)
        step_type = dm_env.StepType.LAST if last else dm_env.StepType.MID
        d = last_discount if last else (discounts[t - 1] if discounts else 1.0)
        adder.add(np.array([t], np.int64), dm_env.TimeStep(step_type, r, d, obs(first_obs + t)))
