"""Test-wide set-up: quiet TF, offscreen MuJoCo, and 4 logical CPU devices.

The logical devices must exist before TensorFlow starts, so they are set here
once for the whole session; tests pick 1, 2 or 4 of them.
"""

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tensorflow as tf  # noqa: E402,F401  (TF starts here, after the variables above)

from rlplat.replication import configure_cpu_replicas  # noqa: E402

MAX_TEST_REPLICAS = 4
configure_cpu_replicas(MAX_TEST_REPLICAS)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (scripts/test.sh), a module's tests share one worker.

    Module-scoped fixtures (a training run, a cluster) are then built once,
    not once per worker; a module already in an ``xdist_group`` keeps it.
    """
    del config
    for item in items:
        if not any(True for _ in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
