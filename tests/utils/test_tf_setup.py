"""tf_setup: thread sizing (the device half is exercised by every CLI run)."""

from rlplat.utils import tf_setup


def test_thread_counts_share_the_cores_between_replicas():
    assert tf_setup.thread_counts(1, cpus=2) == (2, 2)
    assert tf_setup.thread_counts(2, cpus=2) == (1, 2)
    assert tf_setup.thread_counts(4, cpus=16) == (4, 4)
    assert tf_setup.thread_counts(8, cpus=2) == (1, 2)
    assert tf_setup.available_cpus() >= 1


def test_configure_after_start_keeps_threads_and_checks_devices():
    # conftest started TF with 4 logical CPUs; asking for <= 4 is fine.
    tf_setup.configure_tensorflow(num_cpu_replicas=2)
