"""D4PG builder: pickles, per-actor sigma, validated tables, factories wired to real Reverb."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pickle

import dm_env
import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.config import D4PGConfig
from rlplat.replay import make_server

from d4pg_testlib import ACT, OBS, SPEC, small_config


def test_builder_pickles_to_an_equal_value():
    builder = D4PGBuilder(small_config(), sigma_schedule="log", steps_per_call=4)
    assert pickle.loads(pickle.dumps(builder)) == builder


def test_sigma_schedules():
    constant = D4PGBuilder(D4PGConfig(sigma=0.3))
    assert [constant.actor_sigma(i) for i in range(4)] == [0.3] * 4
    log = D4PGBuilder(D4PGConfig(sigma=0.4), sigma_schedule="log", sigma_min=0.05)
    sigmas = [log.actor_sigma(i) for i in range(8)]
    assert sigmas[0] == pytest.approx(0.4)
    assert all(0.05 <= s <= 0.4 for s in sigmas) and len(set(sigmas)) == 8
    # Log-spaced: the 8 sigmas cover [0.05, 0.4] evenly in log space (no big gap).
    gaps = np.diff(np.sort(np.log(sigmas + [0.05])))
    assert gaps.max() < 0.5 * np.log(0.4 / 0.05)
    with pytest.raises(ValueError, match="sigma_schedule"):
        D4PGBuilder(D4PGConfig(), sigma_schedule="linear")


def test_replay_table_is_validated_and_typed_from_the_spec():
    (table,) = D4PGBuilder(small_config(samples_per_insert=4.0)).make_replay_tables(SPEC, 2)
    info = table.info
    assert info.rate_limiter_info.samples_per_insert == 4.0
    assert info.rate_limiter_info.min_size_to_sample == 8
    # Packed by default: one float32 column (obs, action, reward, discount, next obs).
    assert info.signature == tf.TensorSpec((2 * OBS + ACT + 2,), tf.float32)
    (unpacked,) = D4PGBuilder(small_config(samples_per_insert=4.0),
                              pack_transitions=False).make_replay_tables(SPEC, 2)
    assert unpacked.info.signature.observation == tf.TensorSpec((OBS,), tf.float32)
    assert unpacked.info.signature.action == tf.TensorSpec((ACT,), tf.float32)
    with pytest.raises(ValueError, match="global_batch_size"):
        D4PGBuilder(small_config(global_batch_size=16, min_replay_size=8)).make_replay_tables(SPEC, 1)


def test_factories_work_together_over_real_reverb():
    builder = D4PGBuilder(small_config(n_step=3, min_replay_size=8, variable_update_period=5),
                          steps_per_call=2)
    # One thread inserts and samples here, so inserts must never block (the
    # ratio limiter would deadlock it, as in run_local): MinSize, same warm-up.
    (table,) = builder.make_replay_tables(SPEC, 1)
    server = make_server([table.replace(rate_limiter=reverb.rate_limiters.MinSize(8))])
    address = f"localhost:{server.port}"
    try:
        from rlplat import replication  # pylint: disable=g-import-not-at-top

        learner = builder.make_learner(SPEC, replication.make_replicator(1), address)
        adder = builder.make_adder(address, SPEC)
        actor = builder.make_actor(SPEC, learner, adder, actor_index=0, seed=0)
        greedy = builder.make_actor(SPEC, learner, adder, actor_index=0, seed=0, evaluation=True)
        obs = np.zeros(OBS, np.float32)
        actor.observe_first(dm_env.restart(obs))
        for t in range(40):
            action = actor.select_action(obs)
            assert action.shape == (ACT,) and action.dtype == np.float32
            last = t == 39
            actor.observe(action, dm_env.termination(1.0, obs) if last
                          else dm_env.transition(1.0, obs))
        adder.flush()
        for _ in range(3):
            metrics = learner.step()
        assert learner.num_steps == 6 and np.isfinite(metrics["critic_loss"])
        greedy.update(wait=True)
        assert greedy.policy_version == 6
        # The learner's export order and the actor's NumPy ops line up: the
        # greedy action is the Keras policy's output for the same weights.
        probe = np.random.default_rng(0).normal(size=OBS).astype(np.float32)
        np.testing.assert_allclose(greedy.select_action(probe),
                                   learner.policy(probe[None]).numpy()[0], atol=1e-5)
        adder.close()
    finally:
        server.stop()


def test_the_learner_leaves_autograph_only_the_replicator_s_loop_to_convert(monkeypatch):
    """Start-up: AutoGraph's conversions were the largest Python cost of a learner's build and first trace.

    The step, the networks, the NaN guard and the replay dataset's maps have no
    Python control flow on tensors, so only the replicator's multi-step loop
    (a ``for`` over ``tf.range``) and its wrapper are converted. A fresh
    converter (empty cache) makes every conversion visible here, whatever
    earlier tests in this process converted.
    """
    from tensorflow.python.autograph.impl import api  # pylint: disable=g-import-not-at-top
    from tensorflow.python.autograph.pyct import transpiler  # pylint: disable=g-import-not-at-top

    from rlplat import replication  # pylint: disable=g-import-not-at-top

    converted = []
    transform = transpiler.PyToPy.transform_function

    def recording(self, fn, *args, **kwargs):
        converted.append(getattr(fn, "__qualname__", repr(fn)))
        return transform(self, fn, *args, **kwargs)

    monkeypatch.setattr(api, "_TRANSPILER", api.PyToTF())
    monkeypatch.setattr(transpiler.PyToPy, "transform_function", recording)
    builder = D4PGBuilder(small_config(min_replay_size=8), steps_per_call=2)
    (table,) = builder.make_replay_tables(SPEC, 1)
    server = make_server([table.replace(rate_limiter=reverb.rate_limiters.MinSize(8))])
    try:
        learner = builder.make_learner(SPEC, replication.make_replicator(1), f"localhost:{server.port}")
        learner.trace()
    finally:
        server.stop()
    assert sorted(set(converted)) == ["Replicator._make_replicated.<locals>.replicated",
                                      "Replicator._steps_loop.<locals>.loop"], converted
