"""A module's local Ray instance whose workers can unpickle that test module's classes."""

import contextlib
import sys

import ray

from rlplat.distributed import cluster


@contextlib.contextmanager
def local_ray_for(module_name: str, num_cpus: int = 1):
    """Local Ray (``cluster.connect``) with ``module_name`` pickled by value: workers cannot import tests."""
    connection = cluster.connect(num_cpus=num_cpus)
    ray.cloudpickle.register_pickle_by_value(sys.modules[module_name])
    try:
        yield connection
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[module_name])
        cluster.disconnect(connection)
