"""Keras layers as NumPy ops: actors act without running TensorFlow per step.

An agent builds its acting network in Keras once, ``export_layers`` walks the
layers it acts with and returns a picklable list of ops with their weights,
and ``NumpyForward`` runs that list on one observation at a time. Weights
arrive later as the flat list of arrays a learner serves (``op_arrays`` order:
kernel and bias of a Dense, gamma and beta of a LayerNorm, kernel, recurrent
kernel and bias of an LSTM), so no agent writes a NumPy copy of its network
by hand, and the copy cannot drift from the Keras one: an unsupported layer
or activation is refused when the template is made.

``forward`` is the plain batched reference; ``NumpyForward`` computes the same
with fewer NumPy calls, which is what costs at these sizes (a test checks the
two against each other and against Keras).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

ACTIVATIONS = ("linear", "relu", "tanh", "elu")
_ZERO = np.float32(0.0)

Op = Dict[str, Any]


def _activation_name(fn: Any, where: str) -> str:
    name = getattr(fn, "__name__", str(fn))
    if name not in ACTIVATIONS:
        raise ValueError(f"export_layers: {where} has activation {name!r}; supported: {', '.join(ACTIVATIONS)}")
    return name


def _f32(array: Any) -> np.ndarray:
    return np.array(array, np.float32)


def export_layers(layers: Sequence[Any]) -> List[Op]:
    """The built Keras ``layers``, in order, as NumPy ops holding their current weights.

    Supported: ``Dense`` (activations in ``ACTIVATIONS``), last-axis
    ``LayerNormalization`` with scale and center, ``Activation`` and ``LSTM``
    (tanh and sigmoid, with bias); anything else raises ``ValueError``.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top  (only when a template is made)

    ops: List[Op] = []
    for layer in layers:
        if not layer.built:
            raise ValueError(f"export_layers: layer {layer.name!r} is not built; call the network on a "
                             "batch of observations first")
        if isinstance(layer, tf.keras.layers.Dense):
            bias = layer.bias.numpy() if layer.use_bias else np.zeros(layer.units, np.float32)
            ops.append({"op": "dense", "w": _f32(layer.kernel.numpy()), "b": _f32(bias),
                        "act": _activation_name(layer.activation, f"layer {layer.name!r}")})
        elif isinstance(layer, tf.keras.layers.LayerNormalization):
            if list(layer.axis) not in ([1], [-1]) or not (layer.center and layer.scale):
                raise ValueError(f"export_layers: layer {layer.name!r}: only last-axis LayerNormalization "
                                 "with scale and center is supported")
            gamma, beta = layer.get_weights()
            ops.append({"op": "layer_norm", "gamma": _f32(gamma), "beta": _f32(beta), "eps": float(layer.epsilon)})
        elif isinstance(layer, tf.keras.layers.Activation):
            ops.append({"op": "act", "act": _activation_name(layer.activation, f"layer {layer.name!r}")})
        elif isinstance(layer, tf.keras.layers.LSTM):
            cell = layer.cell
            if (getattr(cell.activation, "__name__", "") != "tanh"
                    or getattr(cell.recurrent_activation, "__name__", "") != "sigmoid" or not cell.use_bias):
                raise ValueError(f"export_layers: LSTM {layer.name!r} must use tanh, sigmoid and a bias")
            ops.append({"op": "lstm", "kernel": _f32(cell.kernel.numpy()),
                        "recurrent": _f32(cell.recurrent_kernel.numpy()), "bias": _f32(cell.bias.numpy())})
        else:
            raise ValueError(f"export_layers: unsupported layer {layer.name!r} ({type(layer).__name__})")
    return ops


_ARRAY_KEYS = {"dense": ("w", "b"), "layer_norm": ("gamma", "beta"), "lstm": ("kernel", "recurrent", "bias"),
               "act": ()}


def op_arrays(op: Op) -> List[np.ndarray]:
    """The arrays of one op, in the order a learner serves them."""
    return [op[key] for key in _ARRAY_KEYS[op["op"]]]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so that exp never overflows.
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-x[positive]))
    e = np.exp(x[~positive])
    out[~positive] = e / (1.0 + e)
    return out


def _activate(x: np.ndarray, act: str) -> np.ndarray:
    if act == "relu":
        return np.maximum(x, _ZERO)
    if act == "tanh":
        return np.tanh(x)
    if act == "elu":
        return np.where(x > 0, x, np.expm1(np.minimum(x, _ZERO)))  # min: no overflow on the unused branch
    return x


def _lstm_step(op: Op, x: np.ndarray, state: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    units = op["recurrent"].shape[0]
    h, c = state[..., :units], state[..., units:]
    z = x @ op["kernel"] + h @ op["recurrent"] + op["bias"]
    # Keras' gate order: input, forget, cell candidate, output.
    i, f = _sigmoid(z[..., :units]), _sigmoid(z[..., units:2 * units])
    g, o = np.tanh(z[..., 2 * units:3 * units]), _sigmoid(z[..., 3 * units:])
    c = f * c + i * g
    h = o * np.tanh(c)
    return h, np.concatenate([h, c], axis=-1).astype(np.float32)


def state_size(ops: Sequence[Op]) -> int:
    """Floats of recurrent state (h and c of each LSTM); 0 for a feed-forward net."""
    return sum(2 * op["recurrent"].shape[0] for op in ops if op["op"] == "lstm")


def forward(ops: Sequence[Op], x: np.ndarray, state: Optional[np.ndarray] = None
            ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """The reference pass: ``x`` [D] or [B, D] -> (output, next state or None)."""
    x = np.asarray(x, np.float32)
    states, offset = [], 0
    for op in ops:
        kind = op["op"]
        if kind == "dense":
            x = _activate(x @ op["w"] + op["b"], op["act"])
        elif kind == "layer_norm":
            mean = x.mean(axis=-1, keepdims=True)
            var = np.square(x - mean).mean(axis=-1, keepdims=True)
            x = (x - mean) / np.sqrt(var + op["eps"]) * op["gamma"] + op["beta"]
        elif kind == "act":
            x = _activate(x, op["act"])
        else:
            size = 2 * op["recurrent"].shape[0]
            x, new = _lstm_step(op, x, state[..., offset:offset + size])
            states.append(new)
            offset += size
    next_state = np.concatenate(states, axis=-1) if states else None
    return x.astype(np.float32, copy=False), next_state


_NOT_LOADED = "this policy was pickled before it had weights: load() the served weights first"


class _Shape:
    """What a pickled template keeps of an array it held: its shape (``NumpyForward.__getstate__``)."""

    def __init__(self, shape: Tuple[int, ...]):
        self.shape = tuple(shape)


class NumpyForward:
    """Runs an exported op list on one observation at a time; weights replaced by ``load``.

    Args:
      template: ops from ``export_layers``; they fix the structure and the
        shapes (their weights are the initial ones).

    Pickled before any ``load``, it keeps the template's shapes but not its
    initial weights, which an actor replaces with served ones before it acts
    (``core.WeightPuller``): an actor the learner builds for another node
    then crosses the network without a copy of the policy's arrays. Such a
    copy must ``load`` weights before it runs.
    """

    def __init__(self, template: Sequence[Op]):
        self._template = list(template)
        self.num_arrays = sum(len(op_arrays(op)) for op in self._template)
        self.state_size = state_size(self._template)
        last = next(op for op in reversed(self._template) if op["op"] in ("dense", "lstm"))
        self.output_size = int(last["b"].shape[0] if last["op"] == "dense" else last["recurrent"].shape[0])
        self._ops: List[tuple] = []
        self.load([a for op in self._template for a in op_arrays(op)])
        self._served = False  # still the template's initial weights

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        if not self._served:
            state["_template"] = [{k: _Shape(v.shape) if k in _ARRAY_KEYS[op["op"]] else v for k, v in op.items()}
                                  for op in self._template]
            state["_ops"] = None
        return state

    def load(self, arrays: Sequence[np.ndarray]) -> None:
        """Takes the weights in ``op_arrays`` order (the served variables' order)."""
        self._served = True
        if len(arrays) != self.num_arrays:
            raise ValueError(f"policy weights: got {len(arrays)} arrays, the network has {self.num_arrays}; "
                             "actor and learner were built from different configs")
        ops, i = [], 0
        for op in self._template:
            kind, wanted = op["op"], op_arrays(op)
            got = [np.asarray(a, np.float32) for a in arrays[i:i + len(wanted)]]
            for have, want in zip(got, wanted):
                if have.shape != want.shape:
                    raise ValueError(f"policy weights: {kind} shape {have.shape} != {want.shape}; actor and "
                                     "learner were built from different configs")
            i += len(wanted)
            if kind == "dense":
                ops.append(("dense", got[0], got[1], op["act"]))
            elif kind == "layer_norm":
                inv_n = np.full(got[0].shape, 1.0 / got[0].size, np.float32)
                ops.append(("layer_norm", got[0], got[1], np.float32(op["eps"]), inv_n))
            elif kind == "act":
                ops.append(("act", op["act"]))
            else:
                ops.append(("lstm", {"kernel": got[0], "recurrent": got[1], "bias": got[2]}))
        self._ops = ops

    def initial_state(self) -> Optional[np.ndarray]:
        """Zero recurrent state [state_size], or None for a feed-forward net."""
        return np.zeros(self.state_size, np.float32) if self.state_size else None

    def __call__(self, observation: np.ndarray) -> np.ndarray:
        """The output for one observation of a feed-forward net."""
        return self.step(observation)[0]

    def batch(self, observations: np.ndarray, state: Optional[np.ndarray] = None
              ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """(outputs [K, O], next states [K, S] or None) for K observations at once.

        One matrix product per layer for all K rows: a vectorised actor's
        policy call. Row k equals ``step(observations[k], state[k])`` up to
        float32 round-off (matrix and vector products sum in other orders).
        """
        x = np.asarray(observations, np.float32).reshape(len(observations), -1)
        states, offset = [], 0
        if self._ops is None:
            raise RuntimeError(_NOT_LOADED)
        for op in self._ops:
            kind = op[0]
            if kind == "dense":
                x = np.dot(x, op[1])
                x += op[2]
                act = op[3]
            elif kind == "layer_norm":
                x = x - np.dot(x, op[4])[:, None]
                x *= op[1] / np.sqrt(np.einsum("kd,kd->k", x, x)[:, None] * op[4][0] + op[3])
                x += op[2]
                continue
            elif kind == "act":
                act = op[1]
            else:
                size = 2 * op[1]["recurrent"].shape[0]
                x, new = _lstm_step(op[1], x, state[:, offset:offset + size])
                states.append(new)
                offset += size
                continue
            if act == "relu":
                np.maximum(x, _ZERO, out=x)
            elif act == "tanh":
                np.tanh(x, out=x)
            elif act == "elu":
                y = np.expm1(np.minimum(x, _ZERO))
                x = np.maximum(x, y, out=y)
        return x, (np.concatenate(states, axis=-1) if states else None)

    def step(self, observation: np.ndarray, state: Optional[np.ndarray] = None
             ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """(output [O], next state or None) for one observation."""
        # Every NumPy call costs ~0.3-1 us at these sizes, so the count of calls
        # is what matters: np.dot beats `@`, a dot with 1/n beats .mean(), and
        # elu(x) == max(x, expm1(min(x, 0))) because expm1(x) >= x.
        x = np.asarray(observation, np.float32).reshape(-1)
        states, offset = [], 0
        if self._ops is None:
            raise RuntimeError(_NOT_LOADED)
        for op in self._ops:
            kind = op[0]
            if kind == "dense":
                x = np.dot(x, op[1])
                x += op[2]
                act = op[3]
            elif kind == "layer_norm":
                inv_n = op[4]
                x = x - np.dot(x, inv_n)
                x *= op[1] / np.sqrt(np.dot(x, x) * inv_n[0] + op[3])
                x += op[2]
                continue
            elif kind == "act":
                act = op[1]
            else:
                size = 2 * op[1]["recurrent"].shape[0]
                x, new = _lstm_step(op[1], x, state[offset:offset + size])
                states.append(new)
                offset += size
                continue
            if act == "relu":
                np.maximum(x, _ZERO, out=x)
            elif act == "tanh":
                np.tanh(x, out=x)
            elif act == "elu":
                y = np.expm1(np.minimum(x, _ZERO))
                x = np.maximum(x, y, out=y)
        return x, (np.concatenate(states) if states else None)
