"""Per-process set-up of Ray workers, before TensorFlow or BLAS start.

Two layers, because they act at different times:

1. ``runtime_env(role)`` gives Ray environment variables for the worker
   process. They are in place when the process starts, i.e. before NumPy's
   BLAS (imported by Ray itself) and TensorFlow read them. This is the only
   way to size OpenBLAS's pool in a Ray worker.
2. ``setup_worker(...)`` runs first thing in each worker's ``__init__``: it
   fixes TF's thread pools and hides GPUs from TF. TF may already be imported
   by then (unpickling a builder imports its agent), but its runtime has not
   started, so both settings still apply.

Why one thread per actor: an idle BLAS/TF helper thread spins and steals a
core from an environment.
"""

from __future__ import annotations

import os
from typing import Dict, Optional

_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# Set by the code that started the Ray instance, for every worker it then
# places: e.g. glibc's default malloc arenas back, where the daemons got fewer
# (see ``cluster._few_malloc_arenas``).
WORKER_ENV_OVERRIDES: Dict[str, str] = {}


def runtime_env(role: str, cpu_only: bool = True, threads: Optional[int] = None) -> Dict[str, dict]:
    """Ray ``runtime_env`` for a worker of ``role`` ("actor", "learner", ...).

    Args:
      role: recorded as ``RLPLAT_ROLE`` (shows in the worker's environment).
      cpu_only: hide every GPU (``CUDA_VISIBLE_DEVICES=""``). Ray also hides
        GPUs from workers that asked for none; this makes it explicit.
      threads: BLAS/OpenMP threads; None means 1.
    """
    env = dict(_ONE_THREAD)
    if threads is not None:
        env = {k: str(int(threads)) for k in env}
    env.update({
        "RLPLAT_ROLE": role,
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        # MuJoCo needs a GL backend even headless (envs/ sets the same default).
        "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa"),
    })
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(WORKER_ENV_OVERRIDES)
    return {"env_vars": env}


def setup_light_worker() -> None:
    """Thread limits for a worker that runs no TensorFlow (the evaluator)."""
    for name, value in _ONE_THREAD.items():
        os.environ.setdefault(name, value)


def setup_worker(intra_op_threads: int = 1, inter_op_threads: int = 1, hide_gpus: bool = True,
                 num_cpu_replicas: Optional[int] = None) -> None:
    """Sizes TensorFlow for this worker; call before any TF op runs.

    Args:
      intra_op_threads, inter_op_threads: TF's thread pools.
      hide_gpus: make GPUs invisible to TF (actors, evaluator, replay).
      num_cpu_replicas: split the CPU into this many logical devices (a learner
        replicating over CPUs); ignored when a GPU is visible.
    """
    setup_light_worker()  # the BLAS/OpenMP limits, for anything that reads them late
    from rlplat.utils import tf_setup  # pylint: disable=g-import-not-at-top

    tf = tf_setup.import_tensorflow()
    if hide_gpus and not _runtime_started():
        tf.config.set_visible_devices([], "GPU")
    tf_setup.configure_tensorflow(num_cpu_replicas=num_cpu_replicas,
                                  intra_op_threads=intra_op_threads,
                                  inter_op_threads=inter_op_threads)


def _runtime_started() -> bool:
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top

    return context.context()._initialized  # pylint: disable=protected-access
