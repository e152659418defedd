"""Test-wide set-up: quiet TF, offscreen MuJoCo, and 4 logical CPU devices.

The logical devices must exist before TensorFlow starts, so they are set here
once for the whole session; tests pick 1, 2 or 4 of them.
"""

import fcntl
import os
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tensorflow as tf  # noqa: E402,F401  (TF starts here, after the variables above)

from rlplat.replication import configure_cpu_replicas  # noqa: E402

MAX_TEST_REPLICAS = 4
configure_cpu_replicas(MAX_TEST_REPLICAS)


LOOPBACK_CLUSTER_WAIT_S = 1200.0  # the longest a module waits for the other fake cluster to finish


@pytest.fixture(scope="module")
def loopback_cluster_turn(tmp_path_factory):
    """Holds the machine's one fake-cluster turn for a module that starts a cluster on loopback.

    Under pytest-xdist (``scripts/test.sh`` runs ``--dist loadscope``: each
    module on one worker), two such modules could otherwise start their
    fake clusters at once on different workers. The turn is an exclusive
    lock on a file all workers of this session share; waiting for it is
    bounded, then the test fails saying what held it.
    """
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory, above each worker's own
    deadline = time.monotonic() + LOOPBACK_CLUSTER_WAIT_S
    with open(root / "loopback-cluster.lock", "a+") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test module held the loopback-cluster turn for over "
                                f"{LOOPBACK_CLUSTER_WAIT_S:.0f} s ({lock.name})")
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
