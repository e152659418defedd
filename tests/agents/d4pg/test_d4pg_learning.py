"""D4PG learner: N-vs-1 replicas, learning, target updates, NaN guard, checkpoints, replay errors."""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import subprocess
import sys
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlplat_agents.d4pg.builder import D4PGBuilder
from rlplat_agents.d4pg.learning import D4PGLearner
from rlplat.utils.optimizers import FusedAdam
from rlplat import replication
from rlplat.replay import ReplayTimeoutError, make_server, transition_signature

from d4pg_testlib import SPEC, all_weights, batches_dataset, random_batch, small_config


def _learner(config, batches, num_replicas=1, **kwargs):
    repl = replication.make_replicator(num_replicas)
    return D4PGLearner(config, SPEC, repl, repl.distribute(batches_dataset(batches)), **kwargs)


def _copy_weights(src, dst):
    for a, b in zip(all_weights(src), (v for net in (dst.policy, dst.critic, dst.target_policy,
                                                    dst.target_critic) for v in net.variables)):
        b.assign(a)


@pytest.mark.slow
def test_two_replicas_match_one_replica():
    # Clipping at norm 0.1 is active (checked below), so the all-reduce must
    # happen before clipping for the two runs to agree.
    config = small_config(clipping=True, max_gradient_norm=0.1, target_update_period=2)
    batches = [random_batch(8, seed=s) for s in range(4)]
    one = _learner(config, batches, 1, steps_per_call=3)
    two = _learner(config, batches, 2, steps_per_call=3)
    _copy_weights(one, two)
    initial = all_weights(one)
    m1 = [one.step() for _ in range(2)]
    m2 = [two.step() for _ in range(2)]
    assert one.num_steps == two.num_steps == 4  # Calls cut at the target period: 2 + 2.
    assert m1[0]["critic_grad_norm"] > 0.1
    for a, b in zip(all_weights(one), all_weights(two)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    np.testing.assert_allclose(m1[-1]["critic_loss"], m2[-1]["critic_loss"], rtol=1e-5)
    assert not np.allclose(all_weights(one)[0], initial[0])  # The steps did move the weights.


def test_eager_debug_steps_match_compiled_steps_through_the_same_step_fn():
    """``make_replicator(eager=True)`` (``--debug-eager``) runs the learner's own step as Python."""
    config = small_config(clipping=True, target_update_period=2)
    batches = [random_batch(8, seed=s) for s in range(4)]
    compiled = _learner(config, batches, 1, steps_per_call=2)
    repl = replication.make_replicator(1, eager=True)
    eager = D4PGLearner(config, SPEC, repl, repl.distribute(batches_dataset(batches)), steps_per_call=2)
    _copy_weights(compiled, eager)
    seen = []
    original = eager._losses_and_grads  # pylint: disable=protected-access

    def spy(batch):
        # Python inside the step runs on every step, with concrete values:
        # where a researcher's breakpoint would stop.
        seen.append(float(tf.reduce_sum(batch[2]).numpy()))
        return original(batch)

    eager._losses_and_grads = spy  # pylint: disable=protected-access
    eager._grads_fn = tf.function(spy)  # pylint: disable=protected-access  (as the learner wraps it)
    m_compiled = [compiled.step() for _ in range(2)]
    m_eager = [eager.step() for _ in range(2)]
    assert compiled.num_steps == eager.num_steps == 4
    assert len(seen) == 4  # one Python call per step: nothing was traced and replayed
    assert not tf.config.functions_run_eagerly()  # the switch is put back after each step
    for a, b in zip(all_weights(compiled), all_weights(eager)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m_compiled[-1]["critic_loss"], m_eager[-1]["critic_loss"], rtol=1e-5)


def test_eager_debug_steps_need_one_replica():
    with pytest.raises(replication.ReplicationError, match="one device, not 2 replicas"):
        replication.make_replicator(2, eager=True)


@pytest.mark.slow
def test_critic_loss_falls_on_a_fixed_batch():
    # Terminal transitions (discount 0): the target is the reward itself, a
    # two-atom distribution, so the cross-entropy can fall far below its
    # starting value ln(num_atoms); a bootstrapped target from an untrained
    # critic would be near-uniform and bound the loss near ln(num_atoms).
    batch = random_batch(8)._replace(discount=np.zeros(8, np.float32))
    learner = _learner(small_config(target_update_period=1000), [batch], steps_per_call=1)
    losses = [learner.step()["critic_loss"] for _ in range(50)]
    assert learner.num_steps == 50
    # Unseeded initial logits are only roughly uniform (2.40-2.67 seen), so
    # bound the start from below: high, as ln(num_atoms) for near-uniform logits.
    assert losses[0] > 0.8 * np.log(11), losses[0]
    assert losses[-1] < 0.5 * losses[0], losses[::10]


def test_target_networks_copy_exactly_at_the_period():
    period = 5
    learner = _learner(small_config(target_update_period=period), [random_batch(8)],
                       steps_per_call=3)
    online = {0: [v.numpy() for v in learner.critic.variables]}
    ends = []
    for _ in range(5):
        learner.step()
        ends.append(learner.num_steps)
        online[learner.num_steps] = [v.numpy() for v in learner.critic.variables]
        # After s steps the target holds the online weights from step
        # period * floor((s - 1) / period): copied before that step.
        copied_at = period * ((learner.num_steps - 1) // period)
        for t, o in zip(learner.target_critic.variables, online[copied_at]):
            np.testing.assert_array_equal(t.numpy(), o)
    assert ends == [3, 5, 8, 10, 13]  # Calls are cut at every copy.
    assert not np.array_equal(online[5][0], online[0][0])


def test_nan_reward_raises_a_clear_error():
    bad = random_batch(8)
    bad.reward[3] = np.nan
    learner = _learner(small_config(), [bad], steps_per_call=2)
    # Every batch is bad, so the first step is refused (tests/agents/d4pg/test_d4pg_nan_guard.py
    # checks a NaN in the middle of a call, N replicas and checkpoints).
    with pytest.raises(FloatingPointError, match=r"non-finite critic loss .*at learner step 1; .*"
                                                 r"lower --critic-learning-rate or check the rewards"):
        learner.step()
    assert learner.num_steps == 0


@pytest.mark.slow
def test_checkpoint_restores_counter_optimizer_and_continues_identically(tmp_path):
    config = small_config()
    batches = [random_batch(8, seed=s) for s in range(3)]
    a = _learner(config, batches, steps_per_call=3)
    a.step()
    path = tf.train.Checkpoint(**a.checkpointables()).save(str(tmp_path / "ckpt"))
    b = _learner(config, batches, steps_per_call=3)
    tf.train.Checkpoint(**b.checkpointables()).restore(path).assert_existing_objects_matched()
    assert b.num_steps == 3
    assert int(b.critic_optimizer.iterations) == int(b.policy_optimizer.iterations) == 3
    # Both iterators are at the same position (3 of 3 batches consumed by a;
    # b restarts at 0, which is the same batch modulo 3): the next steps agree.
    ma, mb = a.step(), b.step()
    assert a.num_steps == b.num_steps == 6
    np.testing.assert_allclose(ma["critic_loss"], mb["critic_loss"], rtol=1e-5)
    for x, y in zip(all_weights(a), all_weights(b)):
        np.testing.assert_allclose(x, y, atol=1e-6)


@pytest.mark.slow
def test_get_variables_is_versioned_and_cached():
    learner = _learner(small_config(), [random_batch(8)], steps_per_call=2)
    version, weights = learner.get_variables(["policy"])
    assert version == 0
    again = learner.get_variables(["policy"])[1]["policy"]
    assert again is weights["policy"]  # Cached: no second device-to-host copy.
    for array, var in zip(weights["policy"], learner.policy.variables):
        np.testing.assert_array_equal(array, var.numpy())
    learner.step()
    version, fresh = learner.get_variables(["policy"])
    assert version == 2 and fresh["policy"] is not weights["policy"]
    with pytest.raises(ValueError, match="only 'policy'"):
        learner.get_variables(["critic"])


def test_fused_adam_matches_keras_adam():
    rng = np.random.default_rng(0)
    shapes = [(4, 3), (3,)]
    grads = [[tf.constant(rng.normal(size=s), tf.float32) for s in shapes] for _ in range(5)]
    results = []
    for cls in (tf.keras.optimizers.Adam, FusedAdam):
        variables = [tf.Variable(np.ones(s, np.float32)) for s in shapes]
        opt = cls(0.01)
        for g in grads:
            opt.apply_gradients(zip(g, variables))
        results.append([v.numpy() for v in variables])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def _table(min_size):
    return reverb.Table("priority_table", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 1000,
                        reverb.rate_limiters.MinSize(min_size),
                        signature=transition_signature(SPEC.observations, SPEC.actions))


def _write_items(port, num_items=16):
    client = reverb.Client(f"localhost:{port}")
    batch = random_batch(num_items)
    with client.trajectory_writer(1) as writer:
        for i in range(num_items):
            writer.append([np.asarray(f[i]) for f in batch])
            writer.create_item("priority_table", 1.0, [c[-1] for c in writer.history])


def _reverb_learner(rate_limiter_timeout_ms=2000, step_timeout_s=1.0, min_size=8):
    config = small_config(global_batch_size=8, min_replay_size=min_size)
    server = make_server([_table(min_size)])
    # Unpacked: the tests below write items field by field.
    builder = D4PGBuilder(config, steps_per_call=2, rate_limiter_timeout_ms=rate_limiter_timeout_ms,
                          pack_transitions=False)
    learner = builder.make_learner(SPEC, replication.make_replicator(1), f"localhost:{server.port}")
    learner._step_timeout_s = step_timeout_s  # pylint: disable=protected-access
    return server, learner


def _dead_server_scenario():
    """Runs in a child process (see the test); prints the outcome as JSON, then exits at once."""
    server, learner = _reverb_learner(rate_limiter_timeout_ms=600_000)
    _write_items(server.port)
    learner.step()
    server.stop()
    start = time.monotonic()
    outcome = {"raised": None}
    try:
        for _ in range(1000):  # Prefetched batches may still serve a few steps.
            learner.step()
    except Exception as e:  # pylint: disable=broad-except
        outcome = {"raised": type(e).__name__, "message": str(e)}
    outcome["seconds"] = time.monotonic() - start
    print("OUTCOME " + json.dumps(outcome), flush=True)
    # The sample in flight when the server died stays blocked inside Reverb,
    # and destroying the learner's dataset waits for it: in the suite's own
    # process a later garbage collection stalled whichever test it fell in
    # (for a minute or more), and an exit would wait too. Leave at once.
    os._exit(0)  # pylint: disable=protected-access


@pytest.mark.multiprocess
def test_dead_replay_server_raises_instead_of_hanging():
    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import sys; sys.path[:0] = [{here!r}, {os.path.dirname(os.path.dirname(here))!r}]; "
            "import test_d4pg_learning as t; t._dead_server_scenario()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("OUTCOME ")]
    assert result.returncode == 0 and lines, result.stdout[-2000:] + result.stderr[-3000:]
    outcome = json.loads(lines[-1][len("OUTCOME "):])
    assert outcome["raised"] == ReplayTimeoutError.__name__, outcome
    assert "does not answer" in outcome["message"], outcome
    assert outcome["seconds"] < 30, outcome


def test_empty_replay_past_the_rate_limiter_timeout_raises():
    server, learner = _reverb_learner(rate_limiter_timeout_ms=500, step_timeout_s=30.0)
    try:
        with pytest.raises(ReplayTimeoutError, match="gave no full batch"):
            learner.step()
    finally:
        server.stop()


def _direct_policy_grads(learner, batch):
    """d(-mean E[Q(s_t, pi(s_t))])/d(policy vars), the unclipped DPG, by hand."""
    o_t = tf.constant(batch.next_observation)
    with tf.GradientTape() as tape:
        q = learner.critic.mean(learner.critic((o_t, learner.policy(o_t))))
        loss = -tf.reduce_mean(q)
    return [g.numpy() for g in tape.gradient(loss, learner.policy.trainable_variables)]


def test_policy_gradient_is_dpg_unclipped_and_smaller_when_dqda_is_clipped():
    batch = random_batch(8, seed=5)
    unclipped = _learner(small_config(dqda_clip_norm=0.0), [batch])
    clipped = _learner(small_config(dqda_clip_norm=1e-4), [batch])
    _copy_weights(unclipped, clipped)
    want = _direct_policy_grads(unclipped, batch)
    fields = tuple(tf.constant(x) for x in batch)
    *_, got = unclipped._losses_and_grads(fields)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-4, atol=1e-7)
    *_, small = clipped._losses_and_grads(fields)
    # Each example's dQ/da is scaled down to norm 1e-4, so the whole gradient shrinks.
    norm_small = np.sqrt(sum(np.sum(g.numpy() ** 2) for g in small))
    norm_want = np.sqrt(sum(np.sum(g ** 2) for g in want))
    assert 0 < norm_small < 0.5 * norm_want, (norm_small, norm_want)
