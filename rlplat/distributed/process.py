"""Per-process set-up of Ray workers, before TensorFlow or BLAS start.

Two layers, because they act at different times:

1. ``runtime_env(role)`` gives Ray environment variables for the worker
   process. They are in place when the process starts, i.e. before NumPy's
   BLAS (imported by Ray itself) and TensorFlow read them. This is the only
   way to size OpenBLAS's pool in a Ray worker.
2. ``setup_worker(...)`` runs first thing in each worker's ``__init__``: it
   fixes TF's thread pools and hides GPUs from TF. TF may already be imported
   by then (unpickling a builder imports its agent), but its runtime has not
   started, so both settings still apply. Actors and the evaluator run no
   TensorFlow and call ``setup_light_worker()`` instead, which imports none.

Why one thread per actor: an idle BLAS/TF helper thread spins and steals a
core from an environment.

Why jemalloc in the learner: sampling a batch from Reverb allocates and frees
a few small buffers per item on one thread and frees them on another; with
glibc's malloc that was about a third of the sampling CPU (``perf``), and
Ray ships a jemalloc build. Preloading it in the learner process cut the
sampling CPU per batch by ~25% and raised the Reverb-fed learner's steps/s by
~7% (``bench/d4pg_throughput.py``). Actors measured no better with it, so
they keep glibc. ``RLPLAT_LEARNER_MALLOC=system`` turns it off.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Dict, Mapping, Optional

_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# Set by the code that started the Ray instance, for every worker it then
# places: e.g. glibc's default malloc arenas back, where the daemons got fewer
# (see ``cluster._few_malloc_arenas``).
WORKER_ENV_OVERRIDES: Dict[str, str] = {}


#: ``import tensorflow`` runs ``import distutils``. Under setuptools' default
#: ("local", set up by its ``distutils-precedence.pth`` at interpreter start)
#: that loads setuptools and ``pkg_resources``: about 0.3 CPU-s of a learner's
#: TensorFlow import, on its path to the first step. Workers get Python's own
#: distutils ("stdlib"), which TensorFlow only imports; a value already set is kept.
DISTUTILS_VARIABLE = "SETUPTOOLS_USE_DISTUTILS"


#: "system" keeps glibc's malloc in the learner; "jemalloc" (the default, also when unset) preloads jemalloc.
ALLOCATOR_VARIABLE = "RLPLAT_LEARNER_MALLOC"
ALLOCATOR_CHOICES = ("jemalloc", "system")


def allocator_setting_problem() -> Optional[str]:
    """One line naming the fix when ``RLPLAT_LEARNER_MALLOC`` is set to neither choice; None when it is fine."""
    value = os.environ.get(ALLOCATOR_VARIABLE, ALLOCATOR_CHOICES[0])
    if value in ALLOCATOR_CHOICES:
        return None
    return (f"{ALLOCATOR_VARIABLE}={value!r} is not one of {', '.join(ALLOCATOR_CHOICES)}; "
            f"set it to system for glibc's malloc in the learner, or unset it for jemalloc")


def jemalloc_path() -> Optional[str]:
    """The jemalloc library Ray ships (``ray/core/libjemalloc.so``), found without importing Ray; None if absent."""
    spec = importlib.util.find_spec("ray")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "core", "libjemalloc.so")
        if os.path.isfile(path):
            return path
    return None


def allocator_env(role: str) -> Dict[str, str]:
    """``LD_PRELOAD`` that puts jemalloc under a learner, after whatever is preloaded already; {} otherwise.

    The value keeps ``${LD_PRELOAD}`` for Ray to expand in the worker (a local
    run's loopback shim must stay first); ``expand`` does the same for a
    plain subprocess.
    """
    if role != "learner" or os.environ.get(ALLOCATOR_VARIABLE, ALLOCATOR_CHOICES[0]) == "system":
        return {}
    path = jemalloc_path()
    return {"LD_PRELOAD": "${LD_PRELOAD} " + path} if path else {}


def expand(env_vars: Mapping[str, str], base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """``env_vars`` with ``${NAME}`` replaced from ``base`` (default ``os.environ``; unset: empty), as Ray does."""
    base = os.environ if base is None else base
    return {key: re.sub(r"\$\{([A-Za-z0-9_]+)\}", lambda m: base.get(m.group(1), ""), value).strip()
            for key, value in env_vars.items()}


def subprocess_env(role: str, cpu_only: bool = True, threads: Optional[int] = None) -> Dict[str, str]:
    """This process's environment plus ``runtime_env(role, ...)``'s variables, expanded: for a plain subprocess."""
    return {**os.environ, **expand(runtime_env(role, cpu_only=cpu_only, threads=threads)["env_vars"])}


def runtime_env(role: str, cpu_only: bool = True, threads: Optional[int] = None) -> Dict[str, dict]:
    """Ray ``runtime_env`` for a worker of ``role`` ("actor", "learner", ...).

    Args:
      role: recorded as ``RLPLAT_ROLE`` (shows in the worker's environment).
      cpu_only: hide every GPU (``CUDA_VISIBLE_DEVICES=""``). Ray also hides
        GPUs from workers that asked for none; this makes it explicit.
      threads: BLAS/OpenMP threads; None means 1.

    Every worker gets Python's own distutils (``DISTUTILS_VARIABLE``); a
    learner also gets jemalloc preloaded (``allocator_env``).
    """
    env = dict(_ONE_THREAD)
    if threads is not None:
        env = {k: str(int(threads)) for k in env}
    env.update({
        "RLPLAT_ROLE": role,
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        # MuJoCo needs a GL backend even headless (envs/ sets the same default).
        "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa"),
        DISTUTILS_VARIABLE: os.environ.get(DISTUTILS_VARIABLE, "stdlib"),
    })
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(WORKER_ENV_OVERRIDES)
    env.update(allocator_env(role))
    return {"env_vars": env}


def setup_light_worker() -> None:
    """Thread limits for a worker that runs no TensorFlow itself (actors, the evaluator).

    Should an agent's actor import TensorFlow after all, TF reads its thread
    pools' sizes from these variables when its runtime starts, so it gets one
    thread each, as ``setup_worker(1, 1)`` would give it.
    """
    for name, value in {**_ONE_THREAD, "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}.items():
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
