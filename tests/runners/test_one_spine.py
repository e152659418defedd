"""One Experiment object runs unchanged under the local and the Ray runner, with one result type."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MUJOCO_GL", "osmesa")

import dataclasses
import inspect
import math

import pytest

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat import runners
from rlplat.distributed import cluster

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

CONFIG = D4PGConfig(policy_layer_sizes=(32, 32), critic_layer_sizes=(32, 32), num_atoms=11,
                    global_batch_size=32, min_replay_size=200, samples_per_insert=8.0,
                    variable_update_period=100)


def test_the_runners_share_a_signature():
    local, ray = inspect.signature(runners.run_local), inspect.signature(runners.run_on_ray)
    assert list(local.parameters) == list(ray.parameters) == ["experiment", "layout", "stop_event"]
    assert local.return_annotation == ray.return_annotation == "RunResult"


@pytest.mark.timeout(400)
def test_one_experiment_runs_locally_and_on_ray_with_the_same_result_type(tmp_path):
    experiment = runners.Experiment(D4PGBuilder(CONFIG, steps_per_call=4), "cartpole:swingup", num_actors=1,
                                    max_actor_steps=1000, eval_every_actor_steps=0, eval_episodes=1, seed=4)
    results = {"local": runners.run_local(dataclasses.replace(experiment, logdir=str(tmp_path / "local")))}
    connection = cluster.connect(num_cpus=2)
    try:
        results["ray"] = runners.run_on_ray(dataclasses.replace(experiment, logdir=str(tmp_path / "ray")),
                                            runners.RayLayoutConfig(actor_chunk_steps=500, console=False))
    finally:
        cluster.disconnect(connection)
    for where, result in results.items():
        assert isinstance(result, runners.RunResult), where
        assert result.stop_reason == "max_actor_steps", where
        assert result.actor_steps >= 1000 and result.learner_steps > 0, (where, result.learner_steps)
        assert result.eval_return is not None and math.isfinite(result.eval_return), where
        assert result.evaluations[-1] == (result.actor_steps, result.eval_return), where
        assert result.checkpoint.endswith(f"ckpt-{result.learner_steps}"), where
        assert os.path.exists(result.checkpoint + ".index"), where
        assert result.logdir == str(tmp_path / where)
