"""Loss functions shared by agents: pure TensorFlow, no variables, no infrastructure.

* ``distributional``: categorical projection and TD loss, expected Q (C51, D4PG).
* ``dpg``: deterministic policy-gradient losses (DDPG, D4PG).
* ``vtrace``: V-trace off-policy targets (IMPALA).
* ``policy_gradient``: log-densities, entropies, masked policy-gradient,
  baseline and entropy losses (IMPALA, any actor-critic).

Each is tested against NumPy references and hand-worked cases in
``tests/losses/``.
"""
