"""Utilities shared by every agent and layout.

One small module per concern, imported by name (nothing is imported here, so
importing ``rlplat.utils.tf_setup`` does not pull TensorFlow in early):

- ``tf_setup``: quiet TF logs, thread pools and logical CPU replicas, set
  before TensorFlow starts.
- ``loggers``: ``MetricsLogger`` (TensorBoard + JSONL + console), ``make_logger``.
- ``checkpointing``: ``Checkpointer`` (portable across replica counts,
  chief-only files).
- ``run_info``: ``write_run_info`` (config, package versions, git SHA).
"""
