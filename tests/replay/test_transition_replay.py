"""TransitionReplay: one n-step table, its adder and learner input agree on the item format (packed or not)."""

from __future__ import annotations

import collections

import dm_env
import numpy as np
import pytest
import reverb
import tensorflow as tf
from dm_env import specs

from rlplat.replay import make_server
from rlplat.replay.transition_replay import TransitionReplay
from rlplat.specs import EnvironmentSpec

SPEC = EnvironmentSpec(observations=specs.Array((3,), np.float32), actions=specs.BoundedArray((2,), np.float32, -1, 1),
                       rewards=specs.Array((), np.float32), discounts=specs.Array((), np.float32))
Config = collections.namedtuple("Config", "n_step discount samples_per_insert min_replay_size max_replay_size "
                                          "global_batch_size other_field")


def _replay(**kwargs):
    return TransitionReplay.from_config(Config(2, 0.5, 4.0, 8, 100, 8, "ignored"), **kwargs)


def test_from_config_reads_the_shared_field_names_and_refuses_stalling_limiters():
    replay = _replay(table="mine")
    assert (replay.n_step, replay.discount, replay.table, replay.pack) == (2, 0.5, "mine", True)
    assert replay.learner_kwargs("host:1") == {"replay_address": "host:1", "replay_table": "mine",
                                               "rate_limiter_timeout_ms": replay.rate_limiter_timeout_ms}
    (table,) = replay.make_tables(SPEC, num_actors=3)
    assert table.name == "mine" and table.info.rate_limiter_info.samples_per_insert == 4.0
    with pytest.raises(ValueError, match="min_replay_size >= global_batch_size"):
        TransitionReplay(2, 0.5, 4.0, 4, 100, 8).make_tables(SPEC, 1)


@pytest.mark.parametrize("pack", [True, False])
def test_adder_items_come_back_from_the_input_fn_as_n_step_transitions(pack):
    replay = _replay(pack=pack)
    (table,) = replay.make_tables(SPEC, 1)
    packed = table.info.signature == tf.TensorSpec((3 + 2 + 2 + 3,), tf.float32)
    assert packed == pack
    server = make_server([table.replace(rate_limiter=reverb.rate_limiters.MinSize(8))])
    address = f"localhost:{server.port}"
    try:
        with replay.make_adder(address, SPEC) as adder:
            adder.add_first(dm_env.restart(np.zeros(3, np.float32)))
            for t in range(1, 21):
                adder.add(np.full(2, 0.5, np.float32), dm_env.transition(1.0, np.full(3, t, np.float32)))
        batch = next(iter(replay.make_input_fn(address, SPEC)(tf.distribute.InputContext())))
        np.testing.assert_allclose(batch.reward, 1.5)  # 1 + 0.5 * 1
        np.testing.assert_allclose(batch.discount, 0.25)  # 0.5 ** 2
        np.testing.assert_allclose(batch.next_observation - batch.observation, 2.0)
        assert batch.observation.shape == (8, 3) and batch.action.shape == (8, 2)
    finally:
        server.stop()
