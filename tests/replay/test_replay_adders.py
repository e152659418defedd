"""NStepTransitionAdder against a real Reverb server; values checked by hand."""

from __future__ import annotations

import dm_env
import numpy as np
import pytest
import reverb

from rlplat import replay
from replay_testlib import drain, obs, run_episode

GAMMA = 0.9
REWARDS = [1.0, 2.0, 3.0, 4.0, 5.0]
# n = 3, gamma = 0.9, rewards 1..5, worked out by hand:
#   t=0: 1 + .9*2 + .81*3 = 5.23    t=1: 2 + .9*3 + .81*4 = 7.94
#   t=2: 3 + .9*4 + .81*5 = 10.65   t=3: 4 + .9*5 = 8.5    t=4: 5
HAND_RETURNS = [5.23, 7.94, 10.65, 8.5, 5.0]


@pytest.fixture
def adder(client):
    drain(client)
    with replay.NStepTransitionAdder(client, "queue", n_step=3, discount=GAMMA) as a:
        yield a


def _check(items, returns, discounts, next_obs, first_obs=0):
    assert len(items) == len(returns)
    np.testing.assert_allclose([i.reward for i in items], returns, rtol=1e-6)
    np.testing.assert_allclose([i.discount for i in items], discounts, rtol=1e-6)
    for t, item in enumerate(items):
        np.testing.assert_array_equal(item.observation, obs(first_obs + t))
        np.testing.assert_array_equal(item.action, [t + 1])
        np.testing.assert_array_equal(item.next_observation, obs(first_obs + next_obs[t]))
        assert item.observation.dtype == np.float32


def test_termination_tail_does_not_bootstrap(adder, client):
    run_episode(adder, REWARDS, last_discount=0.0)
    # The window of t=2 already contains the terminal step, so D=0 from there.
    _check(drain(client), HAND_RETURNS, [0.729, 0.729, 0.0, 0.0, 0.0], next_obs=[3, 4, 5, 5, 5])


def test_truncation_tail_bootstraps_with_gamma_k(adder, client):
    run_episode(adder, REWARDS, last_discount=1.0)
    _check(drain(client), HAND_RETURNS, [0.729, 0.729, 0.729, 0.81, 0.9], next_obs=[3, 4, 5, 5, 5])


def test_env_discounts_multiply_into_return(client):
    drain(client)
    with replay.NStepTransitionAdder(client, "queue", 2, GAMMA) as adder:
        run_episode(adder, [1.0, 2.0], last_discount=1.0, discounts=[0.5])
    # t=0: 1 + .9*.5*2 = 1.9, D = .81*.5 = .405;  t=1: 2, D = .9
    _check(drain(client), [1.9, 2.0], [0.405, 0.9], next_obs=[2, 2])


def test_episodes_never_mix(adder, client):
    run_episode(adder, REWARDS, last_discount=0.0)
    run_episode(adder, [10.0, 20.0], last_discount=1.0, first_obs=100)
    items = drain(client)
    assert len(items) == 5 + 2 == adder.num_items
    _check(items[:5], HAND_RETURNS, [0.729, 0.729, 0, 0, 0], [3, 4, 5, 5, 5])
    # Shorter than n: 10 + .9*20 = 28 with D = .81, then 20 with D = .9.
    _check(items[5:], [28.0, 20.0], [0.81, 0.9], [2, 2], first_obs=100)


def test_unfinished_episode_is_written_as_truncated(adder, client):
    run_episode(adder, [1.0, 2.0], last_discount=1.0, end=False)
    assert drain(client) == []  # Nothing complete yet (n=3).
    run_episode(adder, [7.0], last_discount=0.0, first_obs=50)
    items = drain(client)
    _check(items[:2], [2.8, 2.0], [0.81, 0.9], [2, 2])
    _check(items[2:], [7.0], [0.0], [1], first_obs=50)


def test_many_episodes_item_count(client):
    drain(client)
    with replay.NStepTransitionAdder(
        client, "queue", 3, GAMMA, flush_period=4, max_pending_items=8
    ) as a:
        for length in (1, 2, 3, 7, 40):
            run_episode(a, [1.0] * length, last_discount=0.0)
    assert len(drain(client)) == 1 + 2 + 3 + 7 + 40


@pytest.mark.parametrize(
    "field,bad_obs,bad_action",
    [
        ("observation", np.zeros(4), np.array([1])),
        ("action", np.zeros(5), np.array([1, 2])),
    ],
)
def test_signature_mismatch_is_one_line(client, field, bad_obs, bad_action):
    adder = replay.NStepTransitionAdder(client, "queue", 3, GAMMA)
    adder.add_first(dm_env.restart(bad_obs))
    with pytest.raises(ValueError, match=field) as err:
        adder.add(bad_action, dm_env.transition(1.0, bad_obs))
    assert "\n" not in str(err.value)
    adder.close()


def test_unreachable_server_fails_fast(dead_address):
    with pytest.raises(replay.ReplayTimeoutError, match="is it running"):
        replay.NStepTransitionAdder(
            reverb.Client(dead_address), "queue", 3, GAMMA, connect_timeout_s=1
        )


def test_blocked_inserts_time_out_with_reason(signature):
    # A full queue blocks inserts: the flush must give up and say why.
    srv = replay.make_server([replay.make_queue_table("tiny", 2, signature)])
    address = f"localhost:{srv.port}"
    adder = replay.NStepTransitionAdder(
        reverb.Client(address),
        "tiny",
        1,
        GAMMA,
        flush_period=1,
        max_pending_items=1,
        flush_timeout_s=0.3,
    )
    with pytest.raises(replay.ReplayTimeoutError, match="rate limiter"):
        run_episode(adder, [1.0] * 4, last_discount=0.0)
    srv.stop()


def test_priority_fn_sets_item_priority(client):
    with replay.NStepTransitionAdder(
        client, "prio", 1, GAMMA, priority_fn=lambda t: 1.0 + t.reward
    ) as a:
        run_episode(a, [1.0, 5.0], last_discount=0.0)
    # Priorities 2 and 6 with exponent 1: the first item is drawn with p = 2/8.
    # 2000 draws make missing it impossible in practice (0.75**2000), where 20
    # draws missed it once in a CI run (0.75**20 = 0.3%).
    samples = list(client.sample("prio", num_samples=2000, emit_timesteps=False))
    pairs = {(float(s.data[2]), s.info.priority) for s in samples}
    assert pairs == {(1.0, 2.0), (5.0, 6.0)}
    probability = {float(s.data[2]): s.info.probability for s in samples}
    assert probability == pytest.approx({1.0: 0.25, 5.0: 0.75})
    low_share = np.mean([float(s.data[2]) == 1.0 for s in samples])
    assert abs(low_share - 0.25) < 0.06  # six standard deviations at n = 2000


def test_closed_adder_refuses_steps(client):
    adder = replay.NStepTransitionAdder(client, "queue", 3, GAMMA)
    adder.close()
    with pytest.raises(RuntimeError, match="closed"):
        adder.add_first(dm_env.restart(obs(0)))
