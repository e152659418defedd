"""Device discovery and `tf.distribute` strategy choice for the Replicator.

The choice, in order:

1. a TPU, when `TPU_NAME` is set or `tpu=` is passed (TPUStrategy);
2. several workers, when `TF_CONFIG` names a cluster with more than one task
   (MultiWorkerMirroredStrategy);
3. several local devices: all local GPUs, or `num_replicas` logical CPU
   devices on a CPU-only machine (MirroredStrategy);
4. otherwise one device: TF's default strategy, or OneDeviceStrategy when an
   explicit device is named. Both give the same code path (replica context,
   collectives, distributed datasets); the default strategy adds no wrapping
   at all, which OneDeviceStrategy's device-copying iterator does (~20% per
   step of the supervised workload, bench/replication.py).
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import tensorflow as tf


class ReplicationError(ValueError):
    """A replication setting that cannot work, with the fix in the message."""


def runtime_started() -> bool:
    """True once TensorFlow has created its runtime (devices are then fixed)."""
    # Listing logical devices initializes the runtime, so peek at the eager
    # context instead; this is the only way to ask without changing the answer.
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top

    return context.context()._initialized  # pylint: disable=protected-access


def configure_cpu_replicas(num_devices: int) -> None:
    """Splits the host CPU into `num_devices` logical devices.

    Must run before TensorFlow creates its runtime (the first op or device
    query). Calling it again with the same or a smaller number after that is a
    no-op; asking for more devices than were configured raises a
    `ReplicationError` naming the fix.
    """
    if num_devices < 1:
        raise ReplicationError(f"num_replicas must be >= 1 (got {num_devices})")
    physical = tf.config.list_physical_devices("CPU")
    if runtime_started():
        available = len(tf.config.list_logical_devices("CPU"))
        if available < num_devices:
            raise ReplicationError(
                f"{num_devices} CPU replicas requested but TensorFlow already started with "
                f"{available} CPU device(s); call rlplat.replication.configure_cpu_replicas("
                f"{num_devices}) before any TensorFlow op runs")
        return
    current = tf.config.get_logical_device_configuration(physical[0])
    if current is not None and len(current) >= num_devices:
        return
    tf.config.set_logical_device_configuration(
        physical[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])


def cluster_from_tf_config() -> Optional[dict]:
    """Returns the parsed `TF_CONFIG` if it describes more than one task."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ReplicationError(f"TF_CONFIG is not valid JSON ({e}); unset it or fix its value") from e
    cluster = config.get("cluster", {})
    num_tasks = sum(len(v) for v in cluster.values())
    if "task" not in config:
        raise ReplicationError("TF_CONFIG has no 'task' entry; add {\"task\": {\"type\": \"worker\", \"index\": i}}")
    return config if num_tasks > 1 else None


def make_strategy(num_replicas: Optional[int] = None,
                  devices: Optional[Sequence[str]] = None,
                  tpu: Optional[str] = None,
                  collective_timeout_s: Optional[float] = None) -> tf.distribute.Strategy:
    """Builds the strategy for this process; see the module docstring for the order.

    Args:
      num_replicas: replicas on this machine. None means every local GPU, or 1
        on a CPU-only machine. On a CPU-only machine N > 1 uses N logical CPU
        devices (configured here if TF has not started yet).
      devices: explicit device strings; overrides `num_replicas`.
      tpu: a TPU name or address; `TPU_NAME` in the environment also selects
        TPUStrategy.
      collective_timeout_s: multi-worker only: a cross-worker collective that
        has not completed after this long fails (DeadlineExceeded) instead of
        waiting forever for a peer that died or stalled. None: no bound.
    """
    tpu = tpu or os.environ.get("TPU_NAME")
    if tpu:
        # Not exercised in CI (no TPU here); this is the documented TF 2.15 path.
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)

    if cluster_from_tf_config() is not None:
        if devices is not None or num_replicas not in (None, 1):
            # MWMS takes every local GPU (or the one CPU) of each worker; TF 2.15
            # has no per-worker device list, so refuse rather than ignore it.
            raise ReplicationError(
                "num_replicas/devices cannot be combined with a multi-worker TF_CONFIG; "
                "each worker uses all of its GPUs (or its CPU): drop --num-replicas")
        if collective_timeout_s is not None and not collective_timeout_s > 0:
            raise ReplicationError(f"collective_timeout_s must be > 0 (got {collective_timeout_s})")
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=collective_timeout_s)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    if devices is None:
        devices = _local_devices(num_replicas)
        if len(devices) == 1:
            return tf.distribute.get_strategy()
    if len(devices) == 1:
        return tf.distribute.OneDeviceStrategy(devices[0])
    return tf.distribute.MirroredStrategy(
        devices=list(devices), cross_device_ops=_cross_device_ops(devices))


def _local_devices(num_replicas: Optional[int]) -> list:
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        logical = [d.name for d in tf.config.list_logical_devices("GPU")]
        n = len(logical) if num_replicas is None else num_replicas
        if n > len(logical):
            raise ReplicationError(
                f"{n} replicas requested but only {len(logical)} GPU(s) are visible; "
                f"pass --num-replicas {len(logical)} or fewer, or split a GPU with "
                "tf.config.set_logical_device_configuration")
        return logical[:n]
    n = 1 if num_replicas is None else num_replicas
    configure_cpu_replicas(n)
    return [f"/cpu:{i}" for i in range(n)]


def _cross_device_ops(devices: Sequence[str]):
    # NCCL only exists between GPUs; logical CPU devices reduce in host memory.
    if all("GPU" in d.upper() for d in devices):
        return tf.distribute.NcclAllReduce()
    return tf.distribute.ReductionToOneDevice(reduce_to_device=devices[0])
