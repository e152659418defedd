"""The offline checker of `ray up` cluster YAMLs (``rlplat cluster check``).

- ``check``: ``check_cluster_config(path)`` runs Ray's own validation
  (``prepare_config`` + ``validate_config``) and rlplat's rules, returning
  one-line problems; ``validate_cluster_config`` raises on the first.
- ``rules``: rlplat's rules for what Ray's validation misses (worker counts,
  provider keys, learner/actor resources, firewall, token auth, pinned
  installs).
"""
