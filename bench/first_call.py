"""The D4PG learner's first call, alone in a fresh process: what a run's first learner step waits for.

The first ``learner.step()`` of a run traces the step (AutoGraph converts the
Python it calls, then TensorFlow builds the graph), optimises the graph and
runs it; replay warm-up goes on beside it. This builds README command (a)'s
learner (the default D4PG config on ``cartpole:swingup``'s spec) on a local
Reverb server already holding more than ``min_replay_size`` transitions, so
nothing waits for data, and times:

- ``build_s``: ``builder.make_learner``;
- ``first_call_s``: the first call (``steps_per_call`` steps), made of
  ``trace_s`` (``learner.trace()``, which a run's learner does before any
  data is there) and ``first_run_s`` (the first ``learner.step()`` after it:
  graph optimisation and the run);
- ``autograph_s``: the part of it AutoGraph spent converting functions;
- ``steady_call_s``: the median of the next 5 calls.

Prints one JSON line. ``bench/startup.py`` runs it as one of its parts.

    python bench/first_call.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _count_autograph(seconds: list) -> None:
    """Adds the seconds of every AutoGraph function conversion to ``seconds``."""
    from tensorflow.python.autograph.pyct import transpiler  # pylint: disable=g-import-not-at-top

    convert = transpiler.PyToPy.transform_function

    def timed(self, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return convert(self, fn, *args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    transpiler.PyToPy.transform_function = timed


def measure(env_name: str = "cartpole:swingup") -> dict:
    import dm_env  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    import reverb  # pylint: disable=g-import-not-at-top

    from rlplat import replication, specs  # pylint: disable=g-import-not-at-top
    from rlplat.replay import make_server  # pylint: disable=g-import-not-at-top
    from rlplat_agents.d4pg.builder import D4PGBuilder  # pylint: disable=g-import-not-at-top
    from rlplat_agents.d4pg.config import D4PGConfig  # pylint: disable=g-import-not-at-top
    from rlplat_envs import make_environment  # pylint: disable=g-import-not-at-top

    with make_environment(env_name, seed=0) as env:
        spec = specs.make_environment_spec(env)
    config = D4PGConfig()
    builder = D4PGBuilder(config)
    (table,) = builder.make_replay_tables(spec, 1)
    # One thread inserts, then samples: a size limiter, not the ratio, so nothing blocks.
    server = make_server([table.replace(rate_limiter=reverb.rate_limiters.MinSize(config.min_replay_size))])
    address = f"localhost:{server.port}"
    try:
        start = time.perf_counter()
        learner = builder.make_learner(spec, replication.make_replicator(1), address)
        build_s = time.perf_counter() - start
        adder = builder.make_adder(address, spec)
        observation = np.zeros(spec.observations.shape, np.float32)
        action = np.zeros(spec.actions.shape, np.float32)
        adder.add_first(dm_env.restart(observation))
        for _ in range(config.min_replay_size + config.global_batch_size):
            adder.add(action, dm_env.transition(0.0, observation))
        adder.flush()
        conversions: list = []
        _count_autograph(conversions)
        start = time.perf_counter()
        learner.trace()
        trace_s = time.perf_counter() - start
        learner.step()
        first_call_s = time.perf_counter() - start
        steady = []
        for _ in range(5):
            start = time.perf_counter()
            learner.step()
            steady.append(time.perf_counter() - start)
        adder.close()
    finally:
        server.stop()
    return {"env": env_name, "build_s": build_s, "first_call_s": first_call_s, "trace_s": trace_s,
            "first_run_s": first_call_s - trace_s, "autograph_s": sum(conversions),
            "autograph_functions": len(conversions), "steady_call_s": statistics.median(steady),
            "steps_per_call": builder.steps_per_call}


if __name__ == "__main__":
    print(json.dumps(measure()))
