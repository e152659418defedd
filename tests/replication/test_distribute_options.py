"""Replicator.distribute turns tf.data autotuning off unless a dataset chose (pure logic, a recording strategy)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from rlplat.replication.replicator import Replicator


class _RecordingStrategy:
    """Stands in for a strategy: records the datasets ``distribute`` hands over."""

    def __init__(self):
        self.datasets = []

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        del options
        self.datasets.append(dataset_fn(tf.distribute.InputContext()))
        return self.datasets[-1]

    def experimental_distribute_dataset(self, dataset):
        self.datasets.append(dataset)
        return dataset


def test_distributed_datasets_do_not_autotune_unless_they_say_so():
    strategy = _RecordingStrategy()
    repl = Replicator(strategy)
    chosen = tf.data.Options()
    chosen.autotune.enabled = True
    repl.distribute(lambda ctx: tf.data.Dataset.range(8).batch(ctx.get_per_replica_batch_size(4)))
    repl.distribute(tf.data.Dataset.range(8).batch(4))
    repl.distribute(tf.data.Dataset.range(8).with_options(chosen))
    assert [d.options().autotune.enabled for d in strategy.datasets] == [False, False, True]
    # The data is untouched.
    assert [b.tolist() for b in strategy.datasets[0].as_numpy_iterator()] == [[0, 1, 2, 3], [4, 5, 6, 7]]
