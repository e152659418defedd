"""A real in-process Reverb server shared by the replay tests."""

from __future__ import annotations

import numpy as np
import portpicker
import pytest
import reverb
from dm_env import specs

from rlplat import replay

from replay_testlib import ACT_DIM, OBS_DIM


@pytest.fixture(scope="session")
def signature():
    return replay.transition_signature(
        specs.Array((OBS_DIM,), np.float64), specs.Array((ACT_DIM,), np.int64)
    )


@pytest.fixture(scope="session")
def server(signature):
    tables = [
        # FIFO queue: tests read back every item in insertion order.
        replay.make_queue_table("queue", 10_000, signature),
        replay.make_uniform_table("uniform", 10_000, replay.make_rate_limiter(None, 1), signature),
        replay.make_uniform_table("empty", 100, replay.make_rate_limiter(None, 1), signature),
        replay.make_prioritized_table(
            "prio", 100, replay.make_rate_limiter(None, 1), signature, priority_exponent=1.0
        ),
    ]
    srv = replay.make_server(tables)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def address(server):
    return replay.ReplayHandle.from_server(server).address


@pytest.fixture
def client(address):
    return reverb.Client(address)


@pytest.fixture
def dead_address():
    return f"localhost:{portpicker.pick_unused_port()}"
