"""Reverb's writing side without TensorFlow's API: ``Client``, ``TrajectoryWriter``, ``errors``, ``reverb_types``,
and the ``TensorSpec`` and ``dtypes`` that table signatures are made of.

Actors write experience and never run TensorFlow, but ``import reverb`` runs
``import tensorflow``: about 3 CPU-seconds per process on 2 cores (Keras,
``tf.distribute`` and the rest of the public API), paid by every actor of
every run. Reverb's client needs only TensorFlow's core library (its C++
symbols) and a few framework modules, which load in about 0.5 s.

So where the process has not imported TensorFlow yet, this module imports
``reverb.client`` with the two packages' ``__init__`` files skipped: for the
duration of the import, ``tensorflow``, ``tensorflow.compat.v1`` and
``reverb`` are bare package modules, and the core library is loaded the way
TensorFlow itself loads it. The bare modules are removed afterwards, so a
later ``import tensorflow`` or ``import reverb`` in the same process runs the
real packages, which reuse the modules loaded here. Anything that fails on
this path falls back to ``import reverb``. Both pins (tensorflow 2.15.1 and
dm-reverb 0.14.0) are what this path is tested against
(``tests/replay/test_reverb_client.py``).

Where TensorFlow is already imported (a learner, the local runner), this is
plain ``import reverb``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any, Dict

# The dtypes reverb's modules read from ``tensorflow.compat.v1`` at import time (besides the three classes).
_V1_DTYPES = ("uint64", "double", "int64", "int32", "float64")


def _bare_package(name: str, made: Dict[str, types.ModuleType]) -> types.ModuleType:
    spec = importlib.util.find_spec(name)
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__file__ = spec.origin
    sys.modules[name] = made[name] = module
    return module


def _forwarding(name: str, made: Dict[str, types.ModuleType], **names: Any) -> types.ModuleType:
    """A module holding ``names``; once it is gone from ``sys.modules``, any other attribute comes
    from the real module of that name (imported then), for code that kept a reference to it."""
    module = types.ModuleType(name)
    module.__dict__.update(names)
    _forward_missing(module)
    sys.modules[name] = made[name] = module
    return module


def _forward_missing(module: types.ModuleType) -> None:
    def missing(attr: str) -> Any:
        if sys.modules.get(module.__name__) is module:  # still the bare one: no real module to ask
            raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}")
        return getattr(importlib.import_module(module.__name__), attr)

    module.__getattr__ = missing


def _import_light() -> Any:
    made: Dict[str, types.ModuleType] = {}
    try:
        tf = _bare_package("tensorflow", made)
        # pylint: disable=g-import-not-at-top,unused-import
        from tensorflow.python import pywrap_tensorflow  # noqa: F401  (the core library, loaded RTLD_GLOBAL)
        from tensorflow.python.framework import dtypes, tensor_shape, tensor_spec, versions
        from tensorflow.python.framework import tensor as tensor_lib

        tf.__version__ = versions.__version__
        _forward_missing(tf)
        values = {"TensorSpec": tensor_spec.TensorSpec, "Tensor": tensor_lib.Tensor,
                  "TensorShape": tensor_shape.TensorShape, **{n: getattr(dtypes, n) for n in _V1_DTYPES}}
        compat = _forwarding("tensorflow.compat", made)
        compat.v1 = _forwarding("tensorflow.compat.v1", made, **values)
        _bare_package("reverb", made)
        from reverb import client, errors, reverb_types, trajectory_writer
        # pylint: enable=g-import-not-at-top,unused-import
    finally:
        for name, module in made.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
    return types.SimpleNamespace(Client=client.Client, TrajectoryWriter=trajectory_writer.TrajectoryWriter,
                                 errors=errors, reverb_types=reverb_types, TensorSpec=tensor_spec.TensorSpec,
                                 dtypes=dtypes, light=True)


def _import() -> Any:
    if "tensorflow" not in sys.modules and "reverb" not in sys.modules:
        try:
            return _import_light()
        except Exception:  # pylint: disable=broad-except  (the full import below still works)
            pass
    import reverb  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from reverb import reverb_types  # pylint: disable=g-import-not-at-top

    return types.SimpleNamespace(Client=reverb.Client, TrajectoryWriter=reverb.TrajectoryWriter,
                                 errors=reverb.errors, reverb_types=reverb_types, TensorSpec=tf.TensorSpec,
                                 dtypes=tf.dtypes, light=False)


_REVERB = _import()
Client = _REVERB.Client
TrajectoryWriter = _REVERB.TrajectoryWriter
errors = _REVERB.errors
reverb_types = _REVERB.reverb_types
TensorSpec = _REVERB.TensorSpec  # tf.TensorSpec itself
dtypes = _REVERB.dtypes  # tf.dtypes
# Whether this process loaded the client without TensorFlow's Python API.
LIGHT = _REVERB.light
