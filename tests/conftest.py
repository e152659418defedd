"""Test-wide set-up: quiet TF, offscreen MuJoCo, and 4 logical CPU devices.

The logical devices must exist before TensorFlow starts, so they are set here
once for the whole session; tests pick 1, 2 or 4 of them.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tensorflow as tf  # noqa: E402,F401  (TF starts here, after the variables above)

from rlplat.replication import configure_cpu_replicas  # noqa: E402

MAX_TEST_REPLICAS = 4
configure_cpu_replicas(MAX_TEST_REPLICAS)
