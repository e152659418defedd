"""A run's greedy policy as a TensorFlow SavedModel that runs without rlplat (``rlplat export``).

What an export directory holds:

* a SavedModel (``saved_model.pb``, ``variables/``) whose ``serving_default``
  signature takes ``observations``, float32 ``[O]`` (one) or ``[B, O]`` (a
  batch): the flat vector rlplat's environments give. It returns
  ``actions``: ``[*A]`` or ``[B, *A]`` in the environment's OWN bounds and
  dtype (float64 for the control suite), or int32 indices for a discrete
  action spec. The loaded object is also callable: ``model(observations)``.
* ``policy.json``: the environment (name and the run's ``env_kwargs``), the
  observation layout (which slice of the vector each named observation fills:
  keys sorted, each raveled in C order, cast to float32) and the action spec.

The graph is the agent's greedy action (``AgentBuilder.make_greedy_policy``:
the evaluation actor's choice, as TensorFlow ops, on the weights
``evaluation.restore_policy_network`` restores for ``rlplat eval``), then the
environment wrapper's map from [-1, 1] to the bounds, computed in float64 in
the order ``CanonicalActionWrapper.rescale`` computes it. So the exported
policy hands the bare environment what rlplat's wrapped one hands it.

The export is written into a staging folder beside the output and renamed
into place at the end: a failed export leaves no half-written directory.
"""

from __future__ import annotations

import os
import shutil
import secrets
from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

FORMAT = "rlplat-policy/1"
POLICY_JSON = "policy.json"
SIGNATURE = "serving_default"
INPUT_NAME, OUTPUT_NAME = "observations", "actions"


class ExportError(ValueError):
    """An output that cannot be written; the message is one line naming the fix."""


# ------------------------------------------------------------------ output folder
def prepare_output(path: str) -> str:
    """Checks ``-o DIR`` (absent, or an empty directory, in a folder we can write) and makes the staging folder.

    Returns:
      The staging folder (beside DIR, same file system): ``finish`` renames it
      to DIR, ``discard`` removes it.

    Raises:
      ExportError: DIR is a file or a non-empty directory, its folder is
        missing, or nothing can be created there.
    """
    path = os.path.abspath(path)
    if os.path.lexists(path):
        if not os.path.isdir(path):
            raise ExportError(f"-o {path} is a file; pass a new directory for the export")
        try:
            entries = os.listdir(path)
        except OSError as e:
            raise ExportError(f"cannot read -o {path} ({e.strerror}); pass a directory you can write") from None
        if entries:
            raise ExportError(f"-o {path} exists and is not empty; pass a new or empty directory "
                              "(an export never overwrites files)")
        if not os.access(path, os.W_OK):
            raise ExportError(f"cannot write -o {path} (permission denied); pass a directory you can write")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise ExportError(f"-o {path}: its folder {parent} does not exist; create it or pass another -o")
    # os.mkdir, not mkdtemp: the folder becomes DIR, so it takes the user's umask, not mode 0700.
    staging = os.path.join(parent, f".{os.path.basename(path)}.export-{secrets.token_hex(4)}")
    try:
        os.mkdir(staging)
        return staging
    except OSError as e:
        raise ExportError(f"cannot write -o {path} ({e.strerror or e}); pass a directory you can write") from None


def finish(staging: str, path: str) -> None:
    """Moves the finished export into place (over DIR when it is an empty directory)."""
    os.replace(staging, os.path.abspath(path))


def discard(staging: str) -> None:
    """Removes a staging folder that will not be finished."""
    shutil.rmtree(staging, ignore_errors=True)


# -------------------------------------------------------------- the environment
def _wrappers(environment: Any):
    """``environment`` and every environment it wraps, outermost first."""
    while environment is not None:
        yield environment
        environment = getattr(environment, "environment", None)


def _array_spec(spec: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {"shape": [int(d) for d in spec.shape], "dtype": np.dtype(spec.dtype).name}
    if hasattr(spec, "num_values"):
        out.update(kind="discrete", num_values=int(spec.num_values))
    elif hasattr(spec, "minimum"):
        out.update(kind="bounded",
                   minimum=np.broadcast_to(np.asarray(spec.minimum, np.float64), spec.shape).tolist(),
                   maximum=np.broadcast_to(np.asarray(spec.maximum, np.float64), spec.shape).tolist())
    else:
        out["kind"] = "array"
    return out


def native_action_spec(environment: Any) -> Optional[Any]:
    """The action spec under rlplat's [-1, 1] rescaling (``CanonicalActionWrapper``), or None without one."""
    import rlplat_envs as envs  # pylint: disable=g-import-not-at-top

    for layer in _wrappers(environment):
        if isinstance(layer, envs.CanonicalActionWrapper):
            return layer.environment.action_spec()
    return None


def observation_layout(environment: Any) -> Dict[str, Any]:
    """Where each named observation lies in the flat vector (``FlattenObservationWrapper.layout``)."""
    import rlplat_envs as envs  # pylint: disable=g-import-not-at-top

    flat = environment.observation_spec()
    size = int(np.prod(flat.shape))
    parts = [{"name": flat.name or "observation", "start": 0, "stop": size, "shape": [size]}]
    for layer in _wrappers(environment):
        if isinstance(layer, envs.FlattenObservationWrapper):
            inner = layer.environment.observation_spec()
            specs = inner if isinstance(inner, Mapping) else {next(iter(layer.layout)): inner}
            parts = [{"name": key, "start": part.start, "stop": part.stop,
                      "shape": [int(d) for d in specs[key].shape]} for key, part in _layout_items(layer.layout)]
            break
    return {"size": size, "dtype": "float32", "order": "keys sorted, each raveled in C order", "parts": parts}


def _layout_items(layout: Mapping[str, slice]):
    """``layout``'s (key, slice) pairs in vector order."""
    return sorted(layout.items(), key=lambda item: item[1].start)


def describe(environment: Any, env_name: str, env_kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """``policy.json``'s environment, observation and action entries for rlplat's ``environment``."""
    native = native_action_spec(environment)
    action = _array_spec(native if native is not None else environment.action_spec())
    action["rescaled_from"] = [-1.0, 1.0] if native is not None else None
    return {"environment": {"name": env_name, "kwargs": dict(env_kwargs)},
            "observation": observation_layout(environment), "action": action}


# ------------------------------------------------------------------ the graph
def _rescale(environment: Any) -> Callable[[Any], Any]:
    """Agent actions [B, *A] -> the environment's own actions, as the wrapper stack maps them."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    native = native_action_spec(environment)
    spec = environment.action_spec()
    if native is None:
        dtype = tf.as_dtype(np.dtype(spec.dtype))
        return lambda actions: tf.cast(actions, dtype)
    # CanonicalActionWrapper.rescale's numbers and order, in float64: clip, then lo + (a + 1) * half.
    low = np.broadcast_to(np.asarray(native.minimum, np.float64), native.shape)
    high = np.broadcast_to(np.asarray(native.maximum, np.float64), native.shape)
    low_t = tf.constant(low, tf.float64)
    half_t = tf.constant(0.5 * (high - low), tf.float64)
    dtype = tf.as_dtype(np.dtype(native.dtype))

    def rescale(actions: Any) -> Any:
        a = tf.clip_by_value(tf.cast(actions, tf.float64), -1.0, 1.0)
        return tf.cast(low_t + (a + 1.0) * half_t, dtype)

    return rescale


def build_module(act: Callable[[Any], Any], objects: Mapping[str, Any], environment: Any) -> Any:
    """A ``tf.Module`` serving ``act`` (the agent's greedy action) for one observation or a batch.

    Args:
      act: ``AgentBuilder.make_greedy_policy``'s function, observations [B, O] -> agent actions.
      objects: the restored networks it runs (their variables are saved with it).
      environment: rlplat's environment the run trained on (its specs and wrappers).
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    obs_size = int(np.prod(environment.observation_spec().shape))
    action_shape = [int(d) for d in environment.action_spec().shape]
    rescale = _rescale(environment)
    module = tf.Module(name="rlplat_policy")
    module.networks = dict(objects)  # tracked: their variables go into variables/

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32, name=INPUT_NAME)])
    def call(observations):
        tf.debugging.assert_rank_in(observations, [1, 2],
                                    message=f"observations must be [{obs_size}] or [batch, {obs_size}]")
        tf.debugging.assert_equal(tf.shape(observations)[-1], obs_size,
                                  message=f"observations must have {obs_size} values (see policy.json)")
        batch = tf.reshape(observations, [-1, obs_size])
        actions = act(batch)
        actions = tf.reshape(actions, tf.concat([[-1], tf.constant(action_shape, tf.int32)], 0))
        actions = rescale(actions)
        # One observation in, one action out: drop the batch axis again.
        outer = tf.shape(observations)[:-1]
        return tf.reshape(actions, tf.concat([outer, tf.constant(action_shape, tf.int32)], 0))

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32, name=INPUT_NAME)])
    def serve(observations):
        return {OUTPUT_NAME: call(observations)}

    module.__call__ = call
    module.serve = serve
    return module


def write(module: Any, description: Mapping[str, Any], directory: str) -> None:
    """Saves ``module`` as a SavedModel in ``directory`` with ``policy.json`` beside it."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from rlplat import run_dir  # pylint: disable=g-import-not-at-top

    tf.saved_model.save(module, directory, signatures={SIGNATURE: module.serve})
    record = {"format": FORMAT, **description,
              "signature": {"name": SIGNATURE, "input": INPUT_NAME, "output": OUTPUT_NAME,
                            "input_dtype": "float32", "accepts": "one observation [O] or a batch [B, O]"}}
    run_dir.write_json(os.path.join(directory, POLICY_JSON), record)

