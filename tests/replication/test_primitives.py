"""Cross-replica primitives on 1, 2 and 4 logical CPU replicas, against hand computations."""

import numpy as np
import pytest
import tensorflow as tf

from rlplat import replication
from rlplat.replication import ReplicationError

REPLICA_COUNTS = [1, 2, 4]


def _per_replica_value(i):
    # Replica i holds [i + 1, -(i + 1) * 2]; easy to reduce by hand.
    return tf.stack([i + 1.0, -(i + 1.0) * 2.0])


def _expected_values(n):
    return np.array([[i + 1.0, -(i + 1.0) * 2.0] for i in range(n)], np.float32)


@pytest.mark.parametrize("n", REPLICA_COUNTS)
def test_all_reduce_ops_match_numpy(n):
    repl = replication.make_replicator(num_replicas=n)

    def step():
        v = _per_replica_value(tf.cast(replication.replica_id(), tf.float32))
        return {op: replication.all_reduce(v, op) for op in ("sum", "mean", "max", "min")}

    out = repl.run(step, reduce=None)
    values = _expected_values(n)
    expected = {"sum": values.sum(0), "mean": values.mean(0), "max": values.max(0), "min": values.min(0)}
    for op, want in expected.items():
        for replica_value in repl.strategy.experimental_local_results(out[op]):
            np.testing.assert_allclose(replica_value.numpy(), want, rtol=1e-6, err_msg=op)


@pytest.mark.parametrize("n", REPLICA_COUNTS)
def test_all_reduce_takes_nests(n):
    repl = replication.make_replicator(num_replicas=n)

    def step():
        i = tf.cast(replication.replica_id(), tf.float32)
        return replication.all_reduce({"a": i, "b": [i * 2.0, tf.ones([3]) * i]}, "sum")

    out = repl.run(step, reduce="mean")
    total = sum(range(n))
    assert out["a"].numpy() == pytest.approx(total)
    assert out["b"][0].numpy() == pytest.approx(2 * total)
    np.testing.assert_allclose(out["b"][1].numpy(), np.full(3, total))


@pytest.mark.parametrize("n", REPLICA_COUNTS)
def test_all_gather_orders_by_replica(n):
    repl = replication.make_replicator(num_replicas=n)

    def step():
        i = tf.cast(replication.replica_id(), tf.float32)
        # Two rows per replica: [[i, 10 i], [i + .5, 10 i + .5]].
        rows = tf.stack([[i, 10 * i], [i + 0.5, 10 * i + 0.5]])
        return replication.all_gather(rows, axis=0), replication.all_gather(rows, axis=1)

    by_rows, by_cols = repl.run(step, reduce=None)
    blocks = [np.array([[i, 10 * i], [i + 0.5, 10 * i + 0.5]], np.float32) for i in range(n)]
    for got in repl.strategy.experimental_local_results(by_rows):
        np.testing.assert_array_equal(got.numpy(), np.concatenate(blocks, 0))
    for got in repl.strategy.experimental_local_results(by_cols):
        np.testing.assert_array_equal(got.numpy(), np.concatenate(blocks, 1))


@pytest.mark.parametrize("n", REPLICA_COUNTS)
def test_broadcast_sends_replica_zero_value_exactly(n):
    repl = replication.make_replicator(num_replicas=n)

    def step():
        i = replication.replica_id()
        # An int and a float that differ per replica; every replica must see replica 0's.
        return replication.broadcast({"int": i * 7 + 3, "float": tf.cast(i, tf.float32) + 0.1})

    out = repl.run(step, reduce=None)
    for got in repl.strategy.experimental_local_results(out["int"]):
        assert got.numpy() == 3
    for got in repl.strategy.experimental_local_results(out["float"]):
        assert got.numpy() == np.float32(0.1)


@pytest.mark.parametrize("n", REPLICA_COUNTS)
def test_replica_ids_and_count(n):
    repl = replication.make_replicator(num_replicas=n)
    assert repl.num_replicas == n

    def step():
        return replication.replica_id(), tf.constant(replication.num_replicas())

    ids, counts = repl.run(step, reduce=None)
    assert [int(x) for x in repl.strategy.experimental_local_results(ids)] == list(range(n))
    assert {int(x) for x in repl.strategy.experimental_local_results(counts)} == {n}


def test_run_reduces_outputs_with_mean_or_sum():
    repl = replication.make_replicator(num_replicas=4)

    def step():
        return tf.cast(replication.replica_id(), tf.float32)

    assert repl.run(step, reduce="mean").numpy() == pytest.approx(1.5)
    assert repl.run(step, reduce="sum").numpy() == pytest.approx(6.0)
    with pytest.raises(ValueError, match="unknown reduce"):
        repl.run(step, reduce="median")


def test_primitives_in_cross_replica_code_raise_a_clear_error():
    repl = replication.make_replicator(num_replicas=2)
    with repl.scope(), pytest.raises(RuntimeError, match="inside a step_fn"):
        replication.all_reduce(tf.constant(1.0))


def test_primitives_with_no_strategy_act_as_one_replica():
    # Plain single-machine code (no Replicator at all) sees one replica.
    assert replication.all_reduce(tf.constant(2.5), "sum").numpy() == 2.5
    assert replication.broadcast(tf.constant(7)).numpy() == 7
    assert replication.num_replicas() == 1


def test_unknown_all_reduce_op_names_the_choices():
    repl = replication.make_replicator(num_replicas=1)
    with pytest.raises(ValueError, match="sum, mean, max, min"):
        repl.run(lambda: replication.all_reduce(tf.constant(1.0), "median"))


def test_uneven_global_batch_names_a_fix():
    repl = replication.make_replicator(num_replicas=4)
    assert repl.per_replica_batch_size(64) == 16
    with pytest.raises(ReplicationError, match="multiple of 4 such as 60"):
        repl.per_replica_batch_size(62)


def test_more_replicas_than_configured_devices_names_the_fix():
    with pytest.raises(ReplicationError, match="configure_cpu_replicas"):
        replication.make_replicator(num_replicas=64)


def test_strategy_choice_for_local_devices():
    # One replica runs on TF's default strategy: no wrapping, no overhead.
    assert replication.make_replicator().strategy is tf.distribute.get_strategy()
    assert isinstance(replication.make_replicator(devices=["/cpu:1"]).strategy, tf.distribute.OneDeviceStrategy)
    assert isinstance(replication.make_replicator(num_replicas=2).strategy, tf.distribute.MirroredStrategy)


def test_trace_count_counts_each_trace_once_and_only_traces():
    """``trace_count`` is what the soak bench watches for retracing: steady calls add nothing."""
    from rlplat.replication import replicator as replicator_lib  # pylint: disable=g-import-not-at-top

    repl = replication.make_replicator(num_replicas=2)

    def step(batch):
        return {"sum": replication.all_reduce(tf.reduce_sum(batch), "sum")}

    def dataset(batch_size):
        return tf.data.Dataset.from_tensor_slices(np.ones((64, 3), np.float32)).repeat().batch(
            batch_size, drop_remainder=True)

    start = replicator_lib.trace_count()
    iterator = repl.distribute(dataset(4))
    repl.run_steps(step, iterator, 3)
    assert replicator_lib.trace_count() == start + 1
    for num_steps in (3, 5, 1):  # the step count is a tensor: no new trace
        assert repl.run_steps(step, iterator, num_steps)["sum"].numpy() == pytest.approx(12.0)
    assert replicator_lib.trace_count() == start + 1
    repl.run(step, tf.ones([2, 3]))  # another entry point is another trace...
    repl.run(step, tf.ones([2, 3]))
    assert replicator_lib.trace_count() == start + 2
    repl.run(step, tf.ones([5, 3]))  # ...and so is a new shape (what the bench must catch)
    assert replicator_lib.trace_count() == start + 3


def test_trace_steps_traces_the_run_steps_loop_without_reading_a_batch():
    """A learner traces its step while it waits for replay; its first call must then reuse that trace."""
    from rlplat.replication import replicator as replicator_lib  # pylint: disable=g-import-not-at-top

    repl = replication.make_replicator(num_replicas=2)

    def step(batch):
        return {"first": replication.all_reduce(batch[0, 0], "sum")}

    rows = np.arange(64, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    iterator = repl.distribute(tf.data.Dataset.from_tensor_slices(rows).batch(4, drop_remainder=True))
    start = replicator_lib.trace_count()
    repl.trace_steps(step, iterator)
    assert replicator_lib.trace_count() == start + 1
    # Nothing was read: the first step's global batch is rows 0-3, split 0-1 | 2-3 over the replicas.
    assert repl.run_steps(step, iterator, 1)["first"].numpy() == pytest.approx(0.0 + 2.0)
    assert repl.run_steps(step, iterator, 2)["first"].numpy() == pytest.approx(8.0 + 10.0)  # rows 4-7, then 8-11
    assert replicator_lib.trace_count() == start + 1  # the calls used the trace
    repl.trace_steps(step, iterator, reduce="sum")  # another reduction is another function
    assert replicator_lib.trace_count() == start + 2


@pytest.mark.parametrize("num_replicas", [1, 2])
def test_run_steps_traces_the_step_once_and_returns_its_last_outputs(num_replicas):
    """The loop holds the step once: its Python runs once per replica, and the n-th batch gives the outputs."""
    repl = replication.make_replicator(num_replicas=num_replicas)
    traced = []

    def step(batch):
        traced.append(1)  # Python runs here only while tracing
        return {"first": replication.all_reduce(batch[0, 0], "sum")}

    rows = np.arange(64, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    iterator = repl.distribute(tf.data.Dataset.from_tensor_slices(rows).batch(4, drop_remainder=True))
    # Three global batches: rows 0-3, 4-7 and 8-11; the last is split 8-9 | 10-11 over two replicas.
    expected = 8.0 if num_replicas == 1 else 8.0 + 10.0
    assert repl.run_steps(step, iterator, 3)["first"].numpy() == pytest.approx(expected)
    assert len(traced) == num_replicas
    assert repl.run_steps(step, iterator, 1)["first"].numpy() == pytest.approx(expected + 4 * num_replicas)
    assert len(traced) == num_replicas


def test_run_steps_with_outputs_of_unknown_shape_still_traces_the_step_once():
    """Outputs whose shape depends on the batch (no drop_remainder) cannot start the loop as zeros."""
    repl = replication.make_replicator()
    traced = []

    def step(batch):
        traced.append(1)
        return {"doubled": batch * 2.0}

    rows = np.arange(40, dtype=np.float32).reshape(20, 2)
    iterator = repl.distribute(tf.data.Dataset.from_tensor_slices(rows).batch(4))
    np.testing.assert_allclose(repl.run_steps(step, iterator, 3)["doubled"].numpy(), rows[8:12] * 2.0)
    assert len(traced) == 1
