"""Per-role seeds from one global seed, for every runner (no Ray, no TensorFlow).

Every process of a run derives its seed from ``(global seed, role, index)``
through NumPy's ``SeedSequence``, which hashes the pieces together: seeds are
distinct across roles and indices, identical across runs with the same global
seed, and unrelated for neighbouring global seeds (seed 1's actor 0 is not
seed 0's actor 1, as ``seed + index`` would make it).
"""

from __future__ import annotations

import numpy as np

# Role tags inside the hash; appending new roles never changes old seeds.
MAX_SEED = 2**32 - 1  # NumPy's legacy seeds and MuJoCo tasks' RandomState take no more
_ROLES = {"actor": 0, "evaluator": 1, "learner": 2}


def role_seed(global_seed: int, role: str, index: int = 0) -> int:
    """A seed in [0, 2**31) for ``role`` number ``index`` of a run.

    Args:
      global_seed: the run's ``--seed`` (>= 0).
      role: "actor", "evaluator" or "learner".
      index: the worker's index within its role (actor_index for actors).
    """
    if role not in _ROLES:
        raise ValueError(f"unknown role {role!r}; use one of {', '.join(_ROLES)}")
    if global_seed < 0 or index < 0:
        raise ValueError(f"seed and index must be >= 0 (got seed={global_seed}, index={index})")
    sequence = np.random.SeedSequence(entropy=int(global_seed), spawn_key=(_ROLES[role], int(index)))
    # 31 bits: dm_control, TF and NumPy all accept it as a plain int seed.
    return int(sequence.generate_state(1, np.uint32)[0] & 0x7FFFFFFF)


def actor_seed(global_seed: int, actor_index: int) -> int:
    """The seed of actor ``actor_index`` (its environment and exploration noise)."""
    return role_seed(global_seed, "actor", actor_index)


def restart_seed(seed: int, salt: int) -> int:
    """A new seed for a worker that Ray restarted after a crash.

    Re-running ``__init__`` with the original seed would replay the first
    life's environment resets and exploration noise, feeding replay duplicate
    experience. Mixing in ``salt`` (anything that differs between lives, e.g.
    the new process id) gives a fresh stream; exact reproducibility was already
    lost with the crash.
    """
    sequence = np.random.SeedSequence(entropy=(int(seed), int(salt)))
    return int(sequence.generate_state(1, np.uint32)[0] & 0x7FFFFFFF)
