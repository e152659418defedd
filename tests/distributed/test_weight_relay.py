"""``--weight-relay``: one relay per node fetches each version; the node's actors read its shared memory.

Real Ray, real shared memory. The learner here is a Ray actor that says it
sits on another node, so a ``RemoteVariableSource(relay=True)`` takes the
relay path, as an actor on another machine would. That each version's bytes
cross a node's link once is measured on the three-node namespace cluster
(tests/multinode/test_multinode_weights.py).
"""

import os
import time

import numpy as np
import pytest
import ray

from local_ray import local_ray_for
from rlplat.distributed import weight_relay
from rlplat.distributed.variables import RemoteVariableSource

pytestmark = pytest.mark.multiprocess


def _weights(step):
    return step, {"policy": [np.full((3, 2), float(step), np.float32), np.arange(4, dtype=np.float32) + step]}


class _Learner:
    """A version counter that answers pulls and counts them; ``broken`` fails the relay's first fetch."""

    def __init__(self, broken=False):
        self.step, self.pulls, self.broken = 0, 0, broken

    def advance(self, n):
        self.step += n
        return self.step

    def get_variables_if_newer(self, names, version):
        self.pulls += 1
        if self.broken and self.pulls == 2:  # the relay's first fetch: the actor's own pulls work
            raise RuntimeError("no weights here")
        return None if self.step <= version else _weights(self.step)

    def shared_weights_info(self):
        return {"node_id": "a-node-elsewhere", "per_node": True}

    def num_pulls(self):
        return self.pulls


@pytest.fixture(scope="module")
def ray_up():
    with local_ray_for(__name__):
        yield


def _until(predicate, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_actors_of_a_node_read_one_relays_memory_and_stop_calling_the_learner(ray_up):
    learner = ray.remote(_Learner).remote()
    first, second = (RemoteVariableSource(learner, timeout_s=10, relay=True) for _ in range(2))
    for source in (first, second):
        assert source.get_variables(["policy"])[0] == 0  # the first pull, over Ray
        source.get_variables(["policy"])  # attaches: this node's relay, started once for both
        assert source.reads_shared_memory
    names = [n for n in ray.util.list_named_actors() if n.startswith(weight_relay.RELAY_PREFIX)]
    assert len(names) == 1, names

    ray.get(learner.advance.remote(5))
    version, weights = _until(lambda: (lambda v: v if v[0] == 5 else None)(first.get_variables(["policy"])))
    np.testing.assert_array_equal(weights["policy"][0], np.full((3, 2), 5.0, np.float32))
    assert _until(lambda: second.get_variables(["policy"])[0] == 5)

    # From here only the relay asks the learner: the actors' many reads add no call.
    pulls_before = ray.get(learner.num_pulls.remote())
    started = time.monotonic()
    for _ in range(2000):
        first.get_variables(["policy"])
        second.get_variables(["policy"])
    polls = ray.get(learner.num_pulls.remote()) - pulls_before
    elapsed = time.monotonic() - started
    assert polls <= elapsed / 0.02 + 5, (polls, elapsed)  # the relay's poll period, not 4000 pulls
    assert first.num_shared_reads >= 2000 and second.num_shared_reads >= 2000

    relay = ray.get_actor(names[0])
    assert ray.get(relay.counts.remote())["version"] == 5
    block = "/dev/shm/" + ray.get(relay.shared_weights_info.remote())["name"]
    assert os.path.exists(block)
    assert weight_relay.end_relays(learner) == names
    assert not os.path.exists(block)  # the relay removed its block before it was ended
    ray.kill(learner)


def test_a_relay_whose_learner_is_gone_removes_its_block_and_exits(ray_up):
    learner = ray.remote(_Learner).remote()
    source = RemoteVariableSource(learner, timeout_s=5, relay=True)
    source.get_variables(["policy"])
    source.get_variables(["policy"])
    assert source.reads_shared_memory
    name = next(n for n in ray.util.list_named_actors() if n.startswith(weight_relay.RELAY_PREFIX))
    relay = ray.get_actor(name)
    block = "/dev/shm/" + ray.get(relay.shared_weights_info.remote())["name"]
    ray.kill(learner)
    _until(lambda: not os.path.exists(block))
    _until(lambda: name not in ray.util.list_named_actors())


def test_without_a_relay_the_actor_says_so_in_one_line_and_pulls_over_ray(ray_up, capfd):
    learner = ray.remote(_Learner).remote(broken=True)  # the relay's first fetch fails: it never comes up
    source = RemoteVariableSource(learner, timeout_s=5, relay=True)
    source.get_variables(["policy"])
    source.get_variables(["policy"])
    assert not source.reads_shared_memory
    lines = [line for line in capfd.readouterr().out.splitlines() if "weight relay" in line]
    assert lines == ["rlplat: actor: this node has no weight relay it can read; each actor pulls every "
                     "version over Ray"]
    ray.kill(learner)
