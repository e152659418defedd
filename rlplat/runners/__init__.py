"""Runners: where an ``Experiment`` runs. The same call and the same result type for each.

- ``run_local(experiment, layout=LocalLayout(), stop_event=None)``: one
  process, an embedded Reverb server; for debugging and tests.
- ``run_on_ray(experiment, layout=RayLayoutConfig(), stop_event=None)``:
  actors, learner and replay as Ray workers, locally or on a cluster.

Both return a ``RunResult`` and drive their work with the same
``rlplat.controller.Controller``. Importing this package imports neither Ray
nor TensorFlow: ``run_local`` and ``LocalLayout`` load on first use (they
need Reverb), and ``run_on_ray`` imports Ray when called.
"""

import importlib
from typing import Any

from rlplat.distributed.layout_config import RayLayoutConfig
from rlplat.experiment import EnvironmentFactory, Experiment, RunResult
from rlplat.runners.on_ray import run_on_ray

__all__ = ["EnvironmentFactory", "Experiment", "LocalLayout", "RayLayoutConfig", "RunResult",
           "run_local", "run_on_ray"]


def __getattr__(name: str) -> Any:
    if name in ("run_local", "LocalLayout"):
        return getattr(importlib.import_module("rlplat.runners.local"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
