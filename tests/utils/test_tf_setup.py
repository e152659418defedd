"""tf_setup: thread sizing (the device half is exercised by every CLI run)."""

import pytest

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


@pytest.mark.multiprocess
def test_import_tensorflow_leaves_pandas_out_and_importable_after(tmp_path):
    """A fresh process: TensorFlow (and Keras under it) imports without pandas, which still imports after."""
    import subprocess  # pylint: disable=g-import-not-at-top
    import sys  # pylint: disable=g-import-not-at-top

    script = (
        "import sys\n"
        "from rlplat.utils import tf_setup\n"
        "tf = tf_setup.import_tensorflow()\n"
        "tf.keras.layers.Dense(2)(tf.zeros([1, 3]))\n"
        "print('pandas' in sys.modules, any(m.startswith('pandas.') for m in sys.modules))\n"
        "import pandas\n"
        "print(pandas.DataFrame({'a': [1, 2]})['a'].sum())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "False", "3"], done.stdout
