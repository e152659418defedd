"""Supervised digits classification: the first workload on the replication core.

Modules: ``config`` (hyperparameters), ``data`` (digits + input_fn),
``networks`` (MLP with synchronized batch norm), ``learning`` (the
per-replica step), ``train`` (the loop: logs, eval, checkpoints, resume).
Nothing is imported here, so reading the config does not start TensorFlow.
"""
