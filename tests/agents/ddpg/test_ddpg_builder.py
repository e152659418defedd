"""DDPG builder and command: pickling, the factories over real Reverb (n-step items), ``rlplat train ddpg`` flags."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses
import pickle
import tomllib

import dm_env
import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlplat_agents.ddpg.spec import SPEC as DDPG_SPEC
from rlplat.launch import agent_command
from rlplat_agents.ddpg.builder import DDPGBuilder
from rlplat_agents.ddpg.config import DDPGConfig
from rlplat import replication
from rlplat.launch import common
from rlplat.replay import make_server

from ddpg_testlib import ACT, GAMMA, N_STEP, OBS, SPEC, small_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_builder_pickles_to_an_equal_value_and_holds_only_the_config():
    builder = DDPGBuilder(small_config(sigma=0.4))
    assert pickle.loads(pickle.dumps(builder)) == builder
    assert [f.name for f in dataclasses.fields(builder)] == ["config"]


def test_replay_table_is_rate_limited_and_packed():
    (table,) = DDPGBuilder(small_config(samples_per_insert=4.0)).make_replay_tables(SPEC, 2)
    assert table.info.rate_limiter_info.samples_per_insert == 4.0
    assert table.info.rate_limiter_info.min_size_to_sample == 8
    assert table.info.signature == tf.TensorSpec((2 * OBS + ACT + 2,), tf.float32)


def test_factories_work_together_over_real_reverb():
    builder = DDPGBuilder(small_config(variable_update_period=5))
    # One thread inserts and samples here, so inserts must never block (as in run_local): MinSize, same warm-up.
    (table,) = builder.make_replay_tables(SPEC, 1)
    server = make_server([table.replace(rate_limiter=reverb.rate_limiters.MinSize(8))])
    address = f"localhost:{server.port}"
    try:
        learner = builder.make_learner(SPEC, replication.make_replicator(1), address)
        adder = builder.make_adder(address, SPEC)
        actor = builder.make_actor(SPEC, learner, adder, actor_index=0, seed=0)
        greedy = builder.make_actor(SPEC, learner, None, actor_index=0, seed=0, evaluation=True)
        obs = np.zeros(OBS, np.float32)
        actor.observe_first(dm_env.restart(obs))
        for t in range(40):
            action = actor.select_action(obs)
            assert action.shape == (ACT,) and action.dtype == np.float32
            actor.observe(action, dm_env.transition(1.0, obs + t + 1))  # reward 1, discount 1: never ends
        adder.flush()
        # Items are n-step: reward 1 + g + g^2, discount g^3 (the learner bootstraps with it as it is).
        sample = next(iter(builder.make_input_fn(address, SPEC)(tf.distribute.InputContext())))
        np.testing.assert_allclose(sample.reward, sum(GAMMA ** k for k in range(N_STEP)), rtol=1e-6)
        np.testing.assert_allclose(sample.discount, GAMMA ** N_STEP, rtol=1e-6)
        np.testing.assert_allclose(sample.next_observation - sample.observation, N_STEP)
        for _ in range(3):
            metrics = learner.step()
        assert learner.num_steps == 24 and np.isfinite(metrics["critic_loss"])
        greedy.update(wait=True)
        assert greedy.policy_version == 24
        # The served weights and the actor's NumPy ops line up: the greedy action is the Keras policy's.
        probe = np.random.default_rng(0).normal(size=OBS).astype(np.float32)
        np.testing.assert_allclose(greedy.select_action(probe), learner.policy(probe[None]).numpy()[0], atol=1e-5)
        objects, variables = builder.make_policy_network(SPEC)
        assert [v.shape for v in variables] == [v.shape for v in learner.policy.variables]
        assert set(objects) == {"policy"}
        adder.close()
    finally:
        server.stop()


def _parse(*flags):
    parser = common.Parser(prog="rlplat train ddpg")
    agent_command.add_arguments(parser, DDPG_SPEC)
    return parser.parse_args(list(flags))


def test_command_flags_build_the_config_and_the_builder(tmp_path):
    args = _parse("--tau", "0.01", "--critic-layer-sizes", "64,32", "--n-step", "5",
                  "--logdir", str(tmp_path / "run"), "--num-actors", "1")
    logdir, experiment, _ = agent_command.prepare(DDPG_SPEC, args)
    builder = experiment.builder
    assert logdir == str(tmp_path / "run") and isinstance(builder, DDPGBuilder)
    assert builder.config == DDPGConfig(tau=0.01, critic_layer_sizes=(64, 32), n_step=5)
    assert set(DDPG_SPEC.flag_helps()) == set(DDPGConfig().to_dict())


@pytest.mark.parametrize("flags, message", [
    (("--tau", "2"), "set --tau above 0 and at most 1"),
    (("--samples-per-insert", "0.01"), "use --samples-per-insert >= 0.256"),
    (("--global-batch-size", "255", "--num-learner-replicas", "2", "--min-replay-size", "1000"),
     "does not split over --num-learner-replicas 2"),
    (("--env", "cartpole:swingupp"), "cartpole:swingup"),
])
def test_command_refuses_bad_flags_before_anything_starts(tmp_path, flags, message):
    args = _parse(*flags, "--logdir", str(tmp_path / "run"))
    with pytest.raises(common.UsageError, match=message.replace("(", r"\(")):
        agent_command.prepare(DDPG_SPEC, args)
    assert not os.path.exists(tmp_path / "run")


def test_command_is_registered_by_entry_point():
    # Installed metadata only changes with `pip install -e .`; the declaration is checked here.
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        entry_points = tomllib.load(f)["project"]["entry-points"]["rlplat.agents"]
    assert entry_points["ddpg"] == "rlplat_agents.ddpg.spec:SPEC" and DDPG_SPEC.name == "ddpg"
    assert DDPG_SPEC.builder_class() is DDPGBuilder and DDPG_SPEC.config_class is DDPGConfig
