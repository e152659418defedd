"""BatchSequenceAdder writes, per stream, exactly the items of a SequenceAdder of its own (real Reverb)."""

from __future__ import annotations

import dm_env
import numpy as np
import pytest
import reverb
import tree
from dm_env import specs

from rlplat import replay
from rlplat.replay.batch_sequence_adder import BatchSequenceAdder
from rlplat.replay.sequence_adder import SequenceAdder
from rlplat.replay.sequence_signature import as_sequence_step, sequence_signature

T, OBS_DIM, NUM_ACTIONS, K = 4, 3, 2, 4
SIGNATURE = sequence_signature(specs.Array((OBS_DIM,), np.float32), specs.Array((), np.float32),
                               {"logits": specs.Array((NUM_ACTIONS,), np.float32)}, T)


@pytest.fixture(scope="module")
def client():
    srv = replay.make_server([replay.make_queue_table("separate", 10_000, SIGNATURE),
                              replay.make_queue_table("batched", 10_000, SIGNATURE)])
    yield reverb.Client(f"localhost:{srv.port}")
    srv.stop()


def _drain(client, table):
    size = client.server_info(timeout=5)[table].current_size
    samples = client.sample(table, num_samples=size, emit_timesteps=False, unpack_as_table_signature=True)
    return [as_sequence_step(s.data) for s in samples]


def _script(seed, rounds):
    """Per round: how many streams step (the first M), and per stream what happens.

    Episode lengths are drawn so episodes end mid-unroll, on the bootstrap
    step (multiples of T) and after several unrolls; LAST is a termination or
    a truncation at random, and a few episodes are abandoned (a new
    ``add_first`` without a LAST: written as truncated).
    """
    rng = np.random.default_rng(seed)
    lengths = [1, 2, T - 1, T, T + 1, 2 * T, 2 * T + 3, 3 * T - 1]
    left = [0] * K  # steps left in each stream's episode; 0: start one
    episode = [0] * K
    out = []
    for r in range(rounds):
        m = K if rng.random() < 0.8 else int(rng.integers(1, K))
        steps = []
        for k in range(m):
            first = left[k] == 0 or rng.random() < 0.02  # 2%: abandon the episode in progress
            if first:
                left[k] = int(rng.choice(lengths))
                episode[k] += 1
            left[k] -= 1
            kind = "mid" if left[k] else ("term" if rng.random() < 0.5 else "trunc")
            # Observations say whose they are: stream, episode, round (and noise).
            noise = rng.normal(0, 0.01, (2, OBS_DIM)).astype(np.float32)
            obs = np.array([k, episode[k], r], np.float32) + noise[0]
            first_obs = np.array([k, episode[k], -1], np.float32) + noise[1]
            steps.append(dict(first=first, first_obs=first_obs, kind=kind, obs=obs,
                              action=np.float32(rng.integers(NUM_ACTIONS)),
                              reward=np.float32(rng.normal()),
                              logits=rng.normal(size=NUM_ACTIONS).astype(np.float32),
                              log_prob=np.float32(-rng.random()), version=r // 3))
        out.append(steps)
    return out


def _timestep(step):
    if step["kind"] == "term":
        return dm_env.termination(step["reward"], step["obs"])
    if step["kind"] == "trunc":
        return dm_env.truncation(step["reward"], step["obs"], discount=0.9)
    return dm_env.transition(step["reward"], step["obs"], discount=0.95)


def _run_separate(client, script):
    adders = [SequenceAdder(client, "separate", T, signature=SIGNATURE) for _ in range(K)]
    for steps in script:
        for k, step in enumerate(steps):
            if step["first"]:
                adders[k].add_first(dm_env.restart(step["first_obs"]))
            adders[k].add(step["action"], _timestep(step), extras={"logits": step["logits"]},
                          behaviour_log_prob=step["log_prob"], policy_version=step["version"])
    for adder in adders:
        adder.close()


def _run_batched(client, script):
    adder = BatchSequenceAdder(client, "batched", T, K, signature=SIGNATURE)
    for steps in script:
        for k, step in enumerate(steps):
            if step["first"]:
                adder.add_first(k, dm_env.restart(step["first_obs"]))
        adder.add(np.array([s["action"] for s in steps]), [_timestep(s) for s in steps],
                  extras={"logits": np.stack([s["logits"] for s in steps])},
                  behaviour_log_probs=np.array([s["log_prob"] for s in steps]),
                  policy_version=steps[0]["version"])
    adder.close()
    return adder.num_items


def _by_stream(items):
    """Items per stream (step 0 is always real; its observation starts with the stream id), in queue order."""
    streams = {}
    for item in items:
        streams.setdefault(int(round(float(item.observation[0, 0]))), []).append(item)
    return streams


def test_batched_items_equal_k_separate_adders_item_by_item(client):
    script = _script(seed=3, rounds=300)
    _run_separate(client, script)
    num_items = _run_batched(client, script)
    separate, batched = _by_stream(_drain(client, "separate")), _by_stream(_drain(client, "batched"))
    assert sorted(batched) == list(range(K)) and sorted(separate) == list(range(K))
    assert sum(len(v) for v in batched.values()) == num_items
    kinds = {"mid_unroll_end": 0, "bootstrap_end": 0, "truncation": 0, "termination": 0, "full": 0}
    for k in range(K):
        assert len(batched[k]) == len(separate[k]), f"stream {k}"
        for i, (b, s) in enumerate(zip(batched[k], separate[k])):
            for (field, want), got in zip(tree.flatten_with_path(s), tree.flatten(b)):
                want, got = np.asarray(want), np.asarray(got)
                assert got.dtype == want.dtype and got.shape == want.shape, (k, i, field)
                assert np.array_equal(got, want), f"stream {k} item {i} field {field}:\n{got}\n!=\n{want}"
            real = int(s.mask.sum())
            if real == T + 1:
                kinds["full"] += 1
            else:
                kinds["bootstrap_end" if real == 1 else "mid_unroll_end"] += 1
                kinds["truncation" if s.discount[real - 1] > 0 else "termination"] += 1
    # The script really covered every case (on both sides, since the items are equal).
    assert min(kinds.values()) >= 5, kinds


def test_add_before_add_first_and_nested_tables_are_refused(client):
    adder = BatchSequenceAdder(client, "batched", T, 2, signature=SIGNATURE)
    adder.add_first(0, dm_env.restart(np.zeros(OBS_DIM, np.float32)))
    step = dm_env.transition(0.0, np.zeros(OBS_DIM, np.float32))
    with pytest.raises(RuntimeError, match=r"streams \[1\]"):
        adder.add(np.zeros(2, np.float32), [step, step], extras={"logits": np.zeros((2, NUM_ACTIONS))},
                  behaviour_log_probs=np.zeros(2), policy_version=0)
    adder.close()
    nested = sequence_signature({"a": specs.Array((1,), np.float32), "b": specs.Array((2,), np.float32)},
                                specs.Array((), np.float32), {"logits": specs.Array((2,), np.float32)}, T)
    with pytest.raises(ValueError, match="one SequenceAdder per environment"):
        BatchSequenceAdder(client, "batched", T, 2, signature=nested)
