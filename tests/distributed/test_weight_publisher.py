"""``WeightPublisher`` and the actors' side of it: versions at most every period, one object per version.

Real Ray, real object store. The learner here is a Ray actor holding a real
``WeightPublisher``; it says it sits on another node, so the
``RemoteVariableSource`` takes the per-node path (object references), as an
actor on another machine would. That bytes cross each node's link once per
version is tested on the three-node namespace cluster
(tests/multinode/test_multinode_weights.py).
"""

import time

import numpy as np
import pytest
import ray

from local_ray import local_ray_for
from rlplat.distributed.variables import RemoteVariableSource
from rlplat.distributed.weight_publisher import WeightPublisher

pytestmark = pytest.mark.multiprocess


def _weights(step):
    return step, {"policy": [np.full((3, 2), float(step), np.float32), np.arange(4, dtype=np.float32) + step]}


class _Learner:
    """Steps a counter; publishes through a real ``WeightPublisher`` every ``period`` steps."""

    def __init__(self, period):
        self.step = 0
        self.publisher = WeightPublisher(lambda: _weights(self.step), period, shared_memory=False)
        self.publisher.publish()

    def advance(self, n):
        for _ in range(n):
            self.step += 1
            self.publisher.maybe_publish(self.step)
        return self.step

    def get_variables_if_newer(self, names, version):
        published = self.publisher.latest()
        return None if published[0] <= version else published

    def policy_ref_if_newer(self, version):
        return self.publisher.ref_if_newer(version)

    def shared_weights_info(self):
        return dict(self.publisher.shared_info(), node_id="a-node-elsewhere")

    def counts(self):
        return self.publisher.num_published, self.publisher.num_objects


@pytest.fixture(scope="module")
def ray_up():
    with local_ray_for(__name__):
        yield


def test_versions_are_published_every_period_steps_only(ray_up):
    step = [0]
    publisher = WeightPublisher(lambda: _weights(step[0]), period=3, shared_memory=False)
    seen = []
    for step[0] in range(0, 11):
        publisher.maybe_publish(step[0])
        seen.append(publisher.latest()[0])
    assert seen == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9, 9]
    assert publisher.num_published == 4 and publisher.num_objects == 0  # no other node asked yet


def test_a_readers_lag_is_the_learner_step_now_minus_the_version_it_holds(ray_up):
    step = [0]
    publisher = WeightPublisher(lambda: _weights(step[0]), period=10, shared_memory=False)
    for step[0] in range(0, 26):
        publisher.maybe_publish(step[0])
    assert publisher.latest()[0] == 20 and "remote_policy_lag" not in publisher.counts()
    assert publisher.ref_if_newer(20) is None  # 25 - 20 = 5 behind
    assert publisher.ref_if_newer(10)[0] == 20  # 15 behind
    publisher.note_reader(-1)  # holds nothing yet: no lag to count
    publisher.note_reader(24)  # 1 behind
    assert publisher.counts()["remote_policy_lag"] == 5.0  # median of 5, 15 and 1
    assert "remote_policy_lag" not in publisher.counts()  # counted afresh after each report


def test_a_reference_is_made_once_per_version_and_only_once_another_node_asks(ray_up):
    step = [5]
    publisher = WeightPublisher(lambda: _weights(step[0]), period=1, shared_memory=False)
    publisher.publish()
    assert publisher.ref_if_newer(5) is None  # nothing newer than what the reader holds
    version, (ref,) = publisher.ref_if_newer(-1)
    assert version == 5 and publisher.num_objects == 1
    assert publisher.ref_if_newer(-1)[1][0] == ref  # asked again: the same object
    np.testing.assert_array_equal(ray.get(ref)[1], np.arange(4, dtype=np.float32) + 5)
    step[0] = 6
    publisher.maybe_publish(6)  # another node is reading now: put with the publish
    assert publisher.num_objects == 2 and publisher.ref_if_newer(5)[0] == 6


def test_an_actor_on_another_node_adopts_published_versions_through_references(ray_up):
    learner = ray.remote(_Learner).options(max_concurrency=4, num_cpus=0).remote(4)
    source = RemoteVariableSource(learner, timeout_s=30)
    version, weights = source.get_variables(["policy"])  # the first pull carries the weights
    assert version == 0 and not source._by_reference  # pylint: disable=protected-access
    ray.get(learner.advance.remote(6))  # steps 1..6: version 4 published, 5 and 6 not
    version, weights = source.get_variables(["policy"])
    assert source._by_reference  # pylint: disable=protected-access
    assert version == 4
    np.testing.assert_array_equal(weights["policy"][0], np.full((3, 2), 4.0, np.float32))
    assert source.get_variables(["policy"])[0] == 4  # nothing newer published: same version, no fetch
    pulls = source.num_pulls
    ray.get(learner.advance.remote(2))  # step 8: version 8
    version, weights = source.get_variables(["policy"])
    assert version == 8 and source.num_pulls == pulls + 1
    np.testing.assert_array_equal(weights["policy"][1], np.arange(4, dtype=np.float32) + 8)
    assert ray.get(learner.counts.remote()) == (3, 2)  # versions 0, 4, 8; objects for 4 and 8


def test_with_prefetch_the_referenced_object_arrives_while_the_actor_acts_on(ray_up):
    learner = ray.remote(_Learner).options(max_concurrency=4, num_cpus=0).remote(4)
    source = RemoteVariableSource(learner, timeout_s=30, prefetch=True)
    assert source.get_variables(["policy"])[0] == 0  # the first pull waits: nothing to act with yet
    ray.get(learner.advance.remote(4))  # version 4 published
    seen = []
    for _ in range(200):  # each call returns what the actor holds; 10 s at most
        seen.append(source.get_variables(["policy"])[0])
        if seen[-1] == 4:
            break
        time.sleep(0.05)
    assert source._by_reference and seen[-1] == 4, seen  # pylint: disable=protected-access
    # Asked, answered with a reference, then the object fetched: each stage a later call, none waited on.
    assert seen.count(0) >= 2 and set(seen) == {0, 4}, seen
    np.testing.assert_array_equal(source.get_variables(["policy"])[1]["policy"][0], np.full((3, 2), 4.0, np.float32))
    assert source.num_pulls == 2


def test_without_per_node_every_pull_carries_the_weights(ray_up):
    learner = ray.remote(_Learner).options(max_concurrency=4, num_cpus=0).remote(1)
    source = RemoteVariableSource(learner, timeout_s=30, per_node=False)
    source.get_variables(["policy"])
    ray.get(learner.advance.remote(3))
    assert source.get_variables(["policy"])[0] == 3
    assert not source._by_reference  # pylint: disable=protected-access
    assert ray.get(learner.counts.remote())[1] == 0
