"""What every worker role shares: the Ray actor class, this node's IP, the environment and loop, and
the placeholders of an actor built for another process (``UNBOUND_SOURCE``, ``UNBOUND_ADDER``).

Import discipline (for every module of this package): TensorFlow, Reverb and
dm_control are never imported at the top. A worker's ``__init__`` sizes TF's
thread pools and hides GPUs (``process.setup_worker``) before anything builds
TF state; heavy modules are imported after that.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import ray

from rlplat.distributed import ray_serialization

# Ray imports a worker's class before it reads the call's arguments: the lean addons are in place in time.
ray_serialization.install()


def remote(cls, **options):
    """The Ray actor class of ``cls`` with ``options`` (num_cpus, max_restarts, ...).

    Task events are off unless asked for: every weight pull and chunk is a
    Ray task, and the GCS keeps an event record of each (up to 100,000 by
    default), which grew the GCS by about 9 MiB a minute in a D4PG run
    (``bench/soak.py``). rlplat's own logs and ``rlplat status`` carry what
    those events would show.
    """
    options.setdefault("enable_task_events", False)
    if "scheduling_strategy" not in options and ray.util.get_current_placement_group() is not None:
        # Started from inside a placement group (a sweep's Tune trial): the
        # run's workers take their own CPUs from the cluster, not the trial's.
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # pylint: disable=g-import-not-at-top

        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(placement_group=None)
    return ray.remote(cls).options(**options)


def node_ip() -> str:
    """This process's node IP as Ray sees it (127.0.0.1 on a local instance)."""
    return ray.util.get_node_ip_address()


def make_environment(environment, seed: int):
    """``environment(seed)``: the run's ``EnvironmentFactory`` (it loads dm_control only when called)."""
    return environment(int(seed))


def make_loop(environment, actor):
    from rlplat.environment_loop import EnvironmentLoop  # pylint: disable=g-import-not-at-top

    return EnvironmentLoop(environment, actor)


def was_restarted() -> bool:
    """True in a Ray actor that Ray restarted after a failure (False outside Ray)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Ray 2.60 calls its own deprecated actor_id inside
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # pylint: disable=broad-except  (not inside a Ray actor)
        return False


def trace_count() -> int:
    """Replicated-step traces in this process so far (rising in a steady run = retracing)."""
    from rlplat.replication import replicator  # pylint: disable=g-import-not-at-top

    return replicator.trace_count()


def to_python(value: Any) -> Any:
    """Stats as plain Python (floats, ints, lists): cheap to pickle, easy to log."""
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_python(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist() if value.size != 1 else value.reshape(()).item()
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "numpy"):  # a TF tensor
        return to_python(value.numpy())
    return value


class _UnboundSource:
    """The variable source of an actor built for another process; it must be bound there."""

    def get_variables(self, names):
        raise RuntimeError("this actor was built for another process: call bind_source() first")


class _UnboundAdder:
    """The adder of an actor built for another process; the acting process binds its own."""

    def _unbound(self, *args, **kwargs):
        raise RuntimeError("this actor was built for another process: call bind_adder() first")

    add_first = add = _unbound


UNBOUND_SOURCE = _UnboundSource()
UNBOUND_ADDER = _UnboundAdder()
