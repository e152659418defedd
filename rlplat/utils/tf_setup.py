"""Process-level TensorFlow set-up that must happen before TF starts.

TensorFlow fixes its log level when imported, and its thread pools and
logical devices when its runtime starts (the first op or device query). A
launcher therefore calls, in this order and before building anything:

    tf_setup.quiet_logs()                         # before `import tensorflow`
    tf_setup.configure_tensorflow(num_cpu_replicas=N)   # imports TF, sizes it

Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from typing import Optional


def quiet_logs(level: str = "2") -> None:
    """Hides TF's C++ INFO and WARNING lines unless the user set ``TF_CPP_MIN_LOG_LEVEL``.

    Has an effect only before TensorFlow is imported. TF 2.15 still logs three
    harmless "Unable to register cuDNN/cuFFT/cuBLAS factory" errors at import;
    ``import_tensorflow`` drops those.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", level)


# Logged as errors by TF 2.15's import on every machine (a double registration
# of the CUDA plugins); they mean nothing, and they bury the real output.
_HARMLESS_IMPORT_LINES = re.compile(r"Unable to register cu(DNN|FFT|BLAS) factory")


def import_tensorflow():
    """Imports TensorFlow, dropping its known-harmless import-time error lines.

    Everything else TF writes to stderr while importing is passed through.
    Returns the ``tensorflow`` module.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    quiet_logs()
    sys.stderr.flush()
    saved_fd = os.dup(2)
    skip_pandas = _SkipPandas() if "pandas" not in sys.modules else None
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)  # C++ logging writes to fd 2 directly
        try:
            if skip_pandas is not None:
                sys.meta_path.insert(0, skip_pandas)
            import tensorflow as tf  # pylint: disable=g-import-not-at-top
        finally:
            if skip_pandas is not None:
                sys.meta_path.remove(skip_pandas)
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            sys.stderr.write("".join(line for line in text.splitlines(keepends=True)
                                     if not _HARMLESS_IMPORT_LINES.search(line)))
            sys.stderr.flush()
    return tf


class _SkipPandas:  # pylint: disable=too-few-public-methods
    """A finder that makes ``import pandas`` fail while TensorFlow imports.

    Keras's data adapter imports pandas if it can, only so that ``Model.fit``
    takes DataFrames, which no rlplat learner calls; that import is about a
    tenth of TensorFlow's. Keras treats pandas as absent then; a later
    ``import pandas`` in the process works as usual.
    """

    def find_spec(self, name, path=None, target=None):  # pylint: disable=unused-argument
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"{name} is not imported with TensorFlow here", name=name)
        return None


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def thread_counts(num_replicas: int = 1, cpus: Optional[int] = None) -> "tuple[int, int]":
    """``(intra_op, inter_op)`` thread counts for ``num_replicas`` replicas on ``cpus`` cores.

    Each replica's ops get an equal share of the cores (intra-op), and the
    replicas can run side by side (inter-op, at least 2 so a blocking op never
    starves the rest). Oversubscribing a small machine costs more in context
    switches than it gains.
    """
    cpus = available_cpus() if cpus is None else cpus
    num_replicas = max(1, num_replicas)
    return max(1, cpus // num_replicas), max(2, min(cpus, num_replicas))


def configure_tensorflow(num_cpu_replicas: Optional[int] = None,
                         intra_op_threads: Optional[int] = None,
                         inter_op_threads: Optional[int] = None) -> None:
    """Sizes TF's thread pools and, on CPU, splits the CPU into logical replicas.

    Call before TensorFlow runs any op. ``None`` thread counts come from
    ``thread_counts``. ``num_cpu_replicas`` (when given) configures that many
    logical CPU devices through ``rlplat.replication.configure_cpu_replicas``,
    which raises a ``ReplicationError`` naming the fix if it is too late.
    """
    tf = import_tensorflow()
    from rlplat import replication  # pylint: disable=g-import-not-at-top

    intra, inter = thread_counts(num_cpu_replicas or 1)
    intra = intra if intra_op_threads is None else intra_op_threads
    inter = inter if inter_op_threads is None else inter_op_threads
    if not replication.runtime_started():
        # Thread pools are fixed once the runtime starts; afterwards keep them.
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    if num_cpu_replicas is not None and not tf.config.list_physical_devices("GPU"):
        replication.configure_cpu_replicas(num_cpu_replicas)
