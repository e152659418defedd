"""run_steps reports the seconds spent waiting for batches (the learner's bottleneck timing)."""

import time

import numpy as np
import pytest
import tensorflow as tf

from rlplat import replication

DELAY_S = 0.05


def _slow_batches():
    def gen():
        while True:
            time.sleep(DELAY_S)  # a batch that takes DELAY_S to arrive, as from a rate-limited replay
            yield np.ones((4, 3), np.float32)

    return tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec((4, 3), tf.float32))


def _step(batch):
    return {"total": tf.reduce_sum(batch)}


@pytest.mark.parametrize("eager", [False, True])
def test_waiting_for_batches_is_timed_and_compute_is_not(eager):
    repl = replication.make_replicator(1, eager=eager)
    slow = repl.distribute(_slow_batches())
    repl.run_steps(_step, slow, 2)  # trace (compiled) outside the measurement
    out = repl.run_steps(_step, slow, 6)
    assert float(out["total"]) == 12.0
    assert 6 * DELAY_S * 0.8 <= float(out["input_wait_s"]) <= 6 * DELAY_S + 0.5
    fast = repl.distribute(tf.data.Dataset.from_tensors(np.ones((4, 3), np.float32)).repeat())
    repl.run_steps(_step, fast, 2)
    assert float(repl.run_steps(_step, fast, 6)["input_wait_s"]) < 0.05
