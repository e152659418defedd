"""reverb_client: an actor's process writes n-step transitions to a real Reverb server without TensorFlow's API.

The writing process is a fresh Python (as an actor's Ray worker is); the
server and the reading side live in this test's process, which has TensorFlow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import reverb
from dm_env import specs

from rlplat.replay import make_rate_limiter, make_server, make_uniform_table
from rlplat.replay.transition_replay import TransitionReplay
from rlplat.specs import EnvironmentSpec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = EnvironmentSpec(observations=specs.Array((3,), np.float32), actions=specs.BoundedArray((2,), np.float32, -1, 1),
                       rewards=specs.Array((), np.float32), discounts=specs.Array((), np.float32))
REPLAY = TransitionReplay(n_step=1, discount=0.9, samples_per_insert=4.0, min_replay_size=1, max_replay_size=100,
                          global_batch_size=1, table="transitions")
NUM_STEPS = 12

# An actor's writing path: the replay kit's adder, fed one episode of known steps.
WRITER = f"""
import json, sys
import dm_env
import numpy as np
from rlplat.replay import reverb_client
from rlplat.replay.transition_replay import TransitionReplay
from rlplat.specs import EnvironmentSpec
from dm_env import specs
spec = EnvironmentSpec(observations=specs.Array((3,), np.float32),
                       actions=specs.BoundedArray((2,), np.float32, -1, 1),
                       rewards=specs.Array((), np.float32), discounts=specs.Array((), np.float32))
replay = TransitionReplay(1, 0.9, 4.0, 1, 100, 1, table="transitions")
adder = replay.make_adder(sys.argv[1], spec)
adder.add_first(dm_env.restart(np.zeros(3, np.float32)))
for t in range(1, {NUM_STEPS} + 1):
    step = dm_env.transition(np.float32(t), np.full(3, t, np.float32))
    adder.add(np.full(2, 0.01 * t, np.float32), step)
adder.close()
print(json.dumps({{"light": reverb_client.LIGHT, "tensorflow": "tensorflow" in sys.modules,
                   "keras": "keras" in sys.modules}}))
import tensorflow as tf, reverb  # the real packages still load afterwards, and share the client
print(json.dumps({{"client_shared": reverb.Client is reverb_client.Client,
                   "tf_works": float(tf.constant(2.0).numpy()), "has_dataset": hasattr(reverb, "TrajectoryDataset")}}))
"""


def _python(code: str, *args: str) -> list:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def server():
    # No samples-per-insert limit: nothing samples while the writer runs.
    signature = REPLAY.item_format(SPEC)["packing"].table_signature
    srv = make_server([make_uniform_table("transitions", 100, make_rate_limiter(None, 1), signature)])
    yield srv
    srv.stop()


def test_a_process_without_tensorflow_writes_the_transitions_the_learner_reads(server):
    address = f"localhost:{server.port}"
    written, after = _python(WRITER, address)
    assert written == {"light": True, "tensorflow": False, "keras": False}
    assert after == {"client_shared": True, "tf_works": 2.0, "has_dataset": True}
    packing = REPLAY.item_format(SPEC)["packing"]
    client = reverb.Client(address)
    assert client.server_info()["transitions"].current_size == NUM_STEPS
    seen = set()
    for sample in client.sample("transitions", num_samples=64, emit_timesteps=False,
                                unpack_as_table_signature=True):
        item = packing.unpack_numpy(np.asarray(sample.data).reshape(-1))
        t = float(item.reward)
        # Step t: observation t-1 (0 at the restart), action 0.01 t, reward t, discount 0.9, next observation t.
        np.testing.assert_allclose(item.observation, np.full(3, t - 1, np.float32))
        np.testing.assert_allclose(item.action, np.full(2, 0.01 * t, np.float32), rtol=1e-6)
        np.testing.assert_allclose(item.next_observation, np.full(3, t, np.float32))
        assert float(item.discount) == pytest.approx(0.9)
        seen.add(t)
    assert seen <= set(float(t) for t in range(1, NUM_STEPS + 1)) and len(seen) > 1


def test_where_tensorflow_is_already_imported_it_is_plain_reverb():
    (loaded,) = _python("import json, sys, tensorflow, reverb\n"
                        "from rlplat.replay import reverb_client\n"
                        "print(json.dumps({'light': reverb_client.LIGHT,"
                        " 'same': reverb_client.Client is reverb.Client}))")
    assert loaded == {"light": False, "same": True}
