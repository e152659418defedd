"""The D4PG actor: the platform's NumPy policy plus Gaussian exploration noise.

``D4PGActor`` is ``rlplat.gaussian_actor.GaussianActor`` (shared with other
DPG agents; see there for why the policy runs in NumPy and when weights are
pulled); this module adds the template of D4PG's own policy network.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from rlplat.gaussian_actor import GaussianActor
from rlplat.utils import numpy_layers


def policy_template(environment_spec: Any, layer_sizes: Sequence[int]) -> List[Dict[str, Any]]:
    """The policy's NumPy op list (with initial weights), for ``D4PGActor``.

    Built once from a fresh Keras policy so the op order and activations are
    the network's own; the weights are replaced on every pull.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top  (only here)

    from rlplat_agents.d4pg import networks  # pylint: disable=g-import-not-at-top

    obs_size = int(np.prod(environment_spec.observations.shape))
    action_size = int(np.prod(environment_spec.actions.shape))
    policy = networks.make_policy_network(action_size, layer_sizes)
    policy(tf.zeros((1, obs_size)))
    return numpy_layers.export_layers(policy.layers)


class D4PGActor(GaussianActor):
    """Deterministic policy + N(0, sigma^2) noise, clipped to [-1, 1] (``GaussianActor``).

    ``evaluation=True`` acts greedily (no noise) and needs no adder.
    """
