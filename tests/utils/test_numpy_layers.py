"""rlplat.utils.numpy_layers against Keras: every supported layer, batched and one step at a time."""

import pickle

import numpy as np
import pytest
import tensorflow as tf

from rlplat.utils import numpy_layers

OBS = 5


def _randomise(layers, seed):
    rng = np.random.default_rng(seed)
    for layer in layers:
        for v in layer.weights:
            v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))


def _mlp():
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(8, activation="relu"),
        tf.keras.layers.LayerNormalization(epsilon=1e-5),
        tf.keras.layers.Activation("tanh"),
        tf.keras.layers.Dense(6, activation="elu"),
        tf.keras.layers.Dense(3),
    ])
    model(tf.zeros((1, OBS)))
    _randomise(model.layers, seed=1)
    return model


def test_feed_forward_ops_match_keras_batched_and_one_at_a_time():
    model = _mlp()
    ops = pickle.loads(pickle.dumps(numpy_layers.export_layers(model.layers)))  # shipped by value
    assert [op["op"] for op in ops] == ["dense", "layer_norm", "act", "dense", "dense"]
    obs = np.random.default_rng(2).normal(0, 2, (16, OBS)).astype(np.float32)
    expected = model(obs).numpy()
    assert np.abs(expected).max() > 0.1
    got, state = numpy_layers.forward(ops, obs)
    assert state is None and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-5)
    fast = numpy_layers.NumpyForward(ops)
    assert fast.output_size == 3 and fast.initial_state() is None
    for o, e in zip(obs, expected):
        np.testing.assert_allclose(fast(o), e, atol=1e-5)
    batched, state = fast.batch(obs)  # a vectorised actor's one call for K observations
    assert state is None and batched.shape == (16, 3) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, expected, atol=1e-5)


def test_weights_are_taken_in_the_served_variables_order():
    model = _mlp()
    fast = numpy_layers.NumpyForward(numpy_layers.export_layers(model.layers))
    _randomise(model.layers, seed=3)  # new weights reach the NumPy net only through load()
    obs = np.ones(OBS, np.float32)
    assert not np.allclose(fast(obs), model(obs[None]).numpy()[0], atol=1e-4)
    fast.load([v.numpy() for v in model.variables])
    np.testing.assert_allclose(fast(obs), model(obs[None]).numpy()[0], atol=1e-5)
    with pytest.raises(ValueError, match="different configs"):
        fast.load([v.numpy() for v in model.variables][:-1])
    with pytest.raises(ValueError, match="different configs"):
        fast.load([np.zeros((OBS + 1, 8), np.float32)] + [v.numpy() for v in model.variables][1:])


def test_lstm_steps_match_keras_over_a_sequence():
    lstm = tf.keras.layers.LSTM(4, return_sequences=True, return_state=True)
    head = tf.keras.layers.Dense(2)
    seq = np.random.default_rng(4).normal(size=(1, 6, OBS)).astype(np.float32)
    h0 = np.random.default_rng(5).normal(size=(1, 4)).astype(np.float32)
    c0 = np.random.default_rng(6).normal(size=(1, 4)).astype(np.float32)
    out, _, _ = lstm(seq, initial_state=[tf.constant(h0), tf.constant(c0)])
    head(out)
    _randomise([lstm, head], seed=7)
    expected = head(lstm(seq, initial_state=[tf.constant(h0), tf.constant(c0)])[0]).numpy()[0]
    fast = numpy_layers.NumpyForward(numpy_layers.export_layers([lstm, head]))
    assert fast.state_size == 8 and fast.initial_state().shape == (8,)
    state = np.concatenate([h0[0], c0[0]])
    ops = numpy_layers.export_layers([lstm, head])
    batch_state = np.stack([state, state[::-1]])  # two rows with different states
    batched, batch_next = fast.batch(np.stack([seq[0, 0], seq[0, 0]]), batch_state)
    for row in range(2):
        one, one_next = fast.step(seq[0, 0], batch_state[row])
        np.testing.assert_allclose(batched[row], one, atol=1e-6)
        np.testing.assert_allclose(batch_next[row], one_next, atol=1e-6)
    for t in range(6):
        reference, reference_state = numpy_layers.forward(ops, seq[0, t], state)
        got, state = fast.step(seq[0, t], state)
        np.testing.assert_allclose(got, expected[t], atol=1e-5)
        np.testing.assert_allclose(got, reference, atol=1e-6)
        np.testing.assert_allclose(state, reference_state, atol=1e-6)


def test_unbuilt_unknown_and_unsupported_layers_are_refused():
    with pytest.raises(ValueError, match="not built"):
        numpy_layers.export_layers([tf.keras.layers.Dense(3)])
    dropout = tf.keras.layers.Dropout(0.1)
    dropout(tf.zeros((1, OBS)))
    with pytest.raises(ValueError, match="unsupported layer"):
        numpy_layers.export_layers([dropout])
    softplus = tf.keras.layers.Dense(3, activation="softplus")
    softplus(tf.zeros((1, OBS)))
    with pytest.raises(ValueError, match="softplus"):
        numpy_layers.export_layers([softplus])


def test_a_policy_pickled_before_it_has_weights_crosses_without_them_and_runs_once_loaded():
    """An actor built for another process is pickled with its policy: the template's initial weights are not
    shipped (the receiver pulls served ones before acting); weights loaded before pickling are."""
    model = tf.keras.Sequential([tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(3)])
    model(tf.zeros((1, OBS)))
    policy = numpy_layers.NumpyForward(numpy_layers.export_layers(model.layers))
    weights_bytes = sum(v.numpy().nbytes for v in model.weights)
    shipped = pickle.dumps(policy)
    assert len(shipped) < weights_bytes / 4, len(shipped)
    copy = pickle.loads(shipped)
    obs = np.random.default_rng(3).normal(0, 1, OBS).astype(np.float32)
    with pytest.raises(RuntimeError, match="load"):
        copy(obs)
    _randomise(model.layers, seed=4)
    served = [v.numpy() for v in model.weights]  # kernel, bias, kernel, bias: the op_arrays order
    with pytest.raises(ValueError, match="shape"):
        copy.load([served[0].T, *served[1:]])
    copy.load(served)
    np.testing.assert_allclose(copy(obs), model(obs[None]).numpy()[0], rtol=1e-5, atol=1e-5)
    # Once it holds served weights, a pickled copy keeps them.
    again = pickle.loads(pickle.dumps(copy))
    assert len(pickle.dumps(copy)) > weights_bytes
    np.testing.assert_allclose(again(obs), copy(obs))
