"""``RemoteVariableSource(prefetch=True)``: actors act on while the learner answers, never blocked for long."""

import sys
import time

import numpy as np
import pytest
import ray

from rlplat.distributed import cluster
from rlplat.distributed.variables import LearnerUnavailableError, RemoteVariableSource

pytestmark = pytest.mark.multiprocess

_SERVE_S = 0.5  # how long the fake learner takes to answer a pull


class _SlowLearner:
    """Serves version N's weights (an array filled with N); every answer takes ``_SERVE_S``."""

    def __init__(self):
        self.version = 1
        self.hang = False

    def advance(self):
        self.version += 1

    def set_hang(self, hang):
        self.hang = hang

    def get_variables_if_newer(self, names, version):
        time.sleep(3600 if self.hang else _SERVE_S)
        if self.version <= version:
            return None
        return self.version, {n: [np.full(2, float(self.version))] for n in names}


@pytest.fixture(scope="module")
def learner():
    connection = cluster.connect(num_cpus=1)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    handle = ray.remote(_SlowLearner).options(max_concurrency=4, num_cpus=0).remote()
    yield handle
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    cluster.disconnect(connection)


def _timed(source):
    start = time.monotonic()
    version, weights = source.get_variables(["policy"])
    return version, float(weights["policy"][0][0]), time.monotonic() - start


def test_prefetch_answers_at_once_and_adopts_the_previous_answer(learner):
    source = RemoteVariableSource(learner, timeout_s=30, prefetch=True)
    version, value, waited = _timed(source)
    assert (version, value) == (1, 1.0) and waited >= _SERVE_S  # nothing to act with yet: waits
    ray.get(learner.advance.remote())
    version, _, waited = _timed(source)  # sends the request for v2, answers with v1 at once
    assert version == 1 and waited < _SERVE_S / 2
    version, _, waited = _timed(source)  # the request is still on its way
    assert version == 1 and waited < _SERVE_S / 2
    time.sleep(_SERVE_S * 2)
    version, value, waited = _timed(source)  # it arrived: adopted, and the next one sent
    assert (version, value) == (2, 2.0) and waited < _SERVE_S / 2
    assert source.num_pulls == 2


def test_without_prefetch_every_pull_waits_for_the_answer(learner):
    source = RemoteVariableSource(learner, timeout_s=30)
    _timed(source)
    ray.get(learner.advance.remote())
    version, _, waited = _timed(source)
    assert waited >= _SERVE_S and version == ray.get(learner.get_variables_if_newer.remote(
        ["policy"], -1))[0]


def test_an_unanswered_prefetch_fails_after_the_timeout(learner):
    source = RemoteVariableSource(learner, timeout_s=2.0, prefetch=True)
    source.get_variables(["policy"])
    ray.get(learner.set_hang.remote(True))
    try:
        source.get_variables(["policy"])  # sends a request that will not be answered
        start = time.monotonic()
        with pytest.raises(LearnerUnavailableError, match="did not answer"):
            while time.monotonic() - start < 10:
                source.get_variables(["policy"])
                time.sleep(0.1)
        assert 1.5 < time.monotonic() - start < 5
    finally:
        ray.get(learner.set_hang.remote(False))
