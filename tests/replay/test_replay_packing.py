"""Packed transitions: layout maths in NumPy/TF, and a real Reverb round trip."""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tensorflow as tf
from dm_env import specs

from rlplat import replay
from replay_testlib import ACT_DIM, OBS_DIM, drain, run_episode

GAMMA = 0.9
PACKING = replay.TransitionPacking.from_specs(
    specs.Array((OBS_DIM,), np.float64), specs.Array((ACT_DIM,), np.int64))


def test_layout_of_a_flat_transition():
    assert PACKING.sizes == [OBS_DIM, ACT_DIM, 1, 1, OBS_DIM]
    assert PACKING.size == 2 * OBS_DIM + ACT_DIM + 2
    assert PACKING.table_signature == tf.TensorSpec((13,), tf.float32)


def test_nested_observations_round_trip_in_numpy_and_tf():
    obs_spec = {"position": specs.Array((2, 3), np.float64), "velocity": specs.Array((), np.float64)}
    packing = replay.TransitionPacking.from_specs(obs_spec, specs.Array((2,), np.float32))
    assert packing.size == 2 * (6 + 1) + 2 + 2
    rng = np.random.default_rng(0)
    batch = [replay.Transition(
        {"position": rng.standard_normal((2, 3)), "velocity": rng.standard_normal()},
        rng.standard_normal(2), rng.standard_normal(), rng.standard_normal(),
        {"position": rng.standard_normal((2, 3)), "velocity": rng.standard_normal()})
        for _ in range(4)]
    import tree  # pylint: disable=g-import-not-at-top
    packed = np.stack([packing.pack(tree.flatten(t)) for t in batch])
    assert packed.shape == (4, packing.size) and packed.dtype == np.float32
    for unpacked in (packing.unpack_numpy(packed), packing.unpack(tf.constant(packed))):
        for i, t in enumerate(batch):
            got = tree.map_structure(lambda x, i=i: np.asarray(x)[i], unpacked)
            tree.map_structure(
                lambda a, b: np.testing.assert_allclose(a, np.float32(b), rtol=1e-6), got, t)
    # Static shapes survive unpacking (what tf.distribute needs).
    spec = tf.TensorSpec((4, packing.size), tf.float32)
    traced = tf.function(packing.unpack).get_concrete_function(spec).structured_outputs
    assert traced.observation["position"].shape == (4, 2, 3)
    assert traced.reward.shape == (4,)


@pytest.fixture(scope="module")
def packed_address():
    tables = [
        replay.make_queue_table("packed_queue", 10_000, PACKING.table_signature),
        replay.make_uniform_table("packed_uniform", 10_000, replay.make_rate_limiter(None, 1),
                                  PACKING.table_signature),
    ]
    server = replay.make_server(tables)
    yield replay.ReplayHandle.from_server(server).address
    server.stop()


def _episodes(adder):
    run_episode(adder, [1.0, 2.0, 3.0, 4.0, 5.0], last_discount=0.0)
    run_episode(adder, [10.0, 20.0], last_discount=1.0, discounts=[0.5], first_obs=100)
    run_episode(adder, [7.0, 8.0, 9.0, 1.0], last_discount=1.0, first_obs=200)


def test_packed_items_equal_unpacked_items(packed_address, client):
    """Same episodes through both formats: identical n-step transitions."""
    drain(client)
    with replay.NStepTransitionAdder(client, "queue", 3, GAMMA) as adder:
        _episodes(adder)
    reference = drain(client)
    packed_client = reverb.Client(packed_address)
    with replay.NStepTransitionAdder(packed_client, "packed_queue", 3, GAMMA,
                                     packing=PACKING) as adder:
        _episodes(adder)
    size = packed_client.server_info(timeout=5)["packed_queue"].current_size
    assert size == len(reference) == 5 + 2 + 4
    samples = packed_client.sample("packed_queue", num_samples=size, emit_timesteps=False,
                                   unpack_as_table_signature=True)
    got = [PACKING.unpack_numpy(np.asarray(s.data).reshape(-1)) for s in samples]
    for want, have in zip(reference, got):
        for field in replay.Transition._fields:
            np.testing.assert_array_equal(getattr(have, field), getattr(want, field))
    # A hand-checked one: t=0 of the second episode, env discount 0.5 at t=1.
    np.testing.assert_allclose([got[5].reward, got[5].discount], [10 + .9 * .5 * 20, .81 * .5],
                               rtol=1e-6)


def test_dataset_unpacks_batches_with_consistent_values(packed_address):
    with replay.NStepTransitionAdder(reverb.Client(packed_address), "packed_uniform", 3, 0.99,
                                     packing=PACKING) as adder:
        run_episode(adder, [1.0] * 64, last_discount=0.0)
    ds = replay.make_transition_dataset(packed_address, "packed_uniform", 32, packing=PACKING,
                                        rate_limiter_timeout_ms=5000)
    assert ds.element_spec.observation.shape == (32, OBS_DIM)
    batch = next(iter(ds))
    assert isinstance(batch, replay.Transition)
    obs, nxt = batch.observation.numpy()[:, 0], batch.next_observation.numpy()[:, 0]
    steps = nxt - obs  # observation t is full(t), so this is the window length.
    np.testing.assert_array_equal(steps, np.minimum(3, 64 - obs))
    np.testing.assert_allclose(batch.reward.numpy(), [sum(.99 ** k for k in range(int(m)))
                                                      for m in steps], rtol=1e-6)
    np.testing.assert_array_equal(batch.action.numpy()[:, 0], obs + 1)


def test_packing_against_an_unpacked_table_is_a_one_line_error(address, client):
    with pytest.raises(ValueError, match=r"does not hold packed transitions.*TransitionPacking"):
        replay.NStepTransitionAdder(client, "queue", 3, GAMMA, packing=PACKING)
    with pytest.raises(ValueError, match=r"does not hold packed transitions"):
        replay.make_transition_dataset(address, "uniform", 4, packing=PACKING)
