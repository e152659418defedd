"""Server helpers."""

from __future__ import annotations

import pickle

import pytest

from rlplat import replay

TABLES = ("empty", "prio", "queue", "uniform")


def test_wait_for_server_returns_tables(address):
    assert replay.wait_for_server(address, timeout_s=5) == TABLES


def test_wait_for_server_times_out_with_fix(dead_address):
    with pytest.raises(replay.ReplayTimeoutError, match="is it running") as err:
        replay.wait_for_server(dead_address, timeout_s=1)
    assert "\n" not in str(err.value)


def test_handle_is_picklable(server):
    handle = replay.ReplayHandle.from_server(server)
    assert pickle.loads(pickle.dumps(handle)) == handle
    assert handle.address.endswith(f":{server.port}")
    assert handle.tables == TABLES
